"""A cluster with client, admin and cluster secrets and https, with a CA made
at test time: the client with the CA and its token works (also through a
follower); no token, a wrong token, plain http and an untrusted CA fail with
their errors."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

import leasehold

pytestmark = pytest.mark.timeout(90)

CLIENT_TOKEN = "client-token-5f1d9c2e7a"
ADMIN_TOKEN = "admin-token-0b8e4a61d3"
CLUSTER_SECRET = "cluster-secret-93c7e25f08"
WRONG_TOKEN = "not-the-token-4d2a7e9b1c"


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=False,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


def make_ca(
    directory: Path, name: str
) -> tuple[Path, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(CA_KEY_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    path = directory / f"{name}.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path, cert, key


def make_node_cert(
    directory: Path, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey
) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "leasehold node")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / "node.pem", directory / "node-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(_pem_key(key))
    key_path.chmod(0o600)
    return cert_path, key_path


@pytest.fixture
def secured(make_cluster, tmp_path):
    ca_path, ca, ca_key = make_ca(tmp_path, "test-ca")
    cert, key = make_node_cert(tmp_path, ca, ca_key)
    files = {}
    for name, secret in [
        ("client-token", CLIENT_TOKEN),
        ("admin-token", ADMIN_TOKEN),
        ("cluster-secret", CLUSTER_SECRET),
    ]:
        files[name] = tmp_path / name
        files[name].write_text(secret + "\n")
        files[name].chmod(0o600)
    serve_args = (
        "--client-token-file", str(files["client-token"]),
        "--admin-token-file", str(files["admin-token"]),
        "--cluster-secret-file", str(files["cluster-secret"]),
        "--tls-cert-file", str(cert),
        "--tls-key-file", str(key),
        "--ca-file", str(ca_path),
    )  # fmt: skip
    cluster = make_cluster(serve_args=serve_args, ca_file=str(ca_path), token=CLIENT_TOKEN)
    cluster.other_ca = str(make_ca(tmp_path, "other-ca")[0])
    return cluster


def test_tls_and_token(secured):
    cluster = secured
    client = cluster.client()
    assert all(e.startswith("https://") for e in client.endpoints)
    lease = client.acquire("secure", "alice", 10)
    assert client.get("secure").token == lease.token
    client.put_record("secure-record", "secure", lease.token, {"ok": True})
    assert client.get_record("secure-record").value == {"ok": True}

    leader = cluster.wait_for_leader()
    follower = cluster.follower_of(leader)
    through_follower = leasehold.Client(
        [cluster.addrs[follower]], token=CLIENT_TOKEN, ca_file=cluster.ca_file
    )
    assert through_follower.get("secure").token == lease.token
    as_admin = cluster.client(token=ADMIN_TOKEN)
    assert as_admin.get("secure").token == lease.token, "the admin token opens the client API"

    with pytest.raises(leasehold.Unauthorized) as no_token:
        cluster.client(token=None).get("secure")
    assert (no_token.value.status, no_token.value.code) == (401, "unauthenticated")
    with pytest.raises(leasehold.Forbidden) as wrong:
        cluster.client(token=WRONG_TOKEN).acquire("secure", "mallory", 10)
    assert (wrong.value.status, wrong.value.code) == (403, "permission_denied")
    with pytest.raises(leasehold.Forbidden):
        client.remove_member(3)  # the client token does not open the admin API
    with pytest.raises(leasehold.NotMember):
        as_admin.remove_member(99)

    plain = leasehold.Client([f"http://{a}" for a in cluster.endpoints()], token=CLIENT_TOKEN)
    with pytest.raises(leasehold.TlsRequired) as tls:
        plain.get("secure")
    assert (tls.value.status, tls.value.code) == (400, "tls_required")

    # Raised at the first refused certificate, not retried: with an hour's
    # retry budget, a retry would run into the test's timeout.
    untrusting = cluster.client(ca_file=cluster.other_ca, retry_budget=3600)
    with pytest.raises(leasehold.Unavailable) as untrusted:
        untrusting.get("secure")
    assert untrusted.value.status is None
    assert "certificate" in str(untrusted.value).lower()
    with pytest.raises(leasehold.Unavailable) as untrusted_watch:
        next(iter(untrusting.watch()))
    assert "certificate" in str(untrusted_watch.value).lower()

    assert client.get("secure").owner == "alice", "nothing changed"
    client.release("secure", lease.token)
    assert client.get("secure") is None


def test_lock_guard_over_tls(secured):
    client = secured.client()
    with client.lock("secure-guard", ttl=3, owner="alice") as lease:
        first = lease.valid_until()
        while lease.valid_until() == first:
            assert not lease.is_lost()
            lease.lost.wait(0.05)
        assert client.get("secure-guard").token == lease.token
    assert client.get("secure-guard") is None


def test_a_user_refused_on_another_teams_lock_gets_forbidden(secured):
    """A user whose role grants lock on ``a-`` only cannot release ``b-``
    locks: ``Forbidden`` names the permission and the lock; its own lock works."""
    cluster = secured
    admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    base = cluster.url(cluster.ids[0])
    for method, path, body in [
        ("POST", "/v1/auth/roles", {"name": "team-a"}),
        ("POST", "/v1/auth/roles/team-a/grants", {"permission": "lock", "prefix": "a-"}),
    ]:
        reply = cluster._http.request(method, base + path, json=body, headers=admin)
        assert reply.status_code == 200, reply.text
    created = cluster._http.post(base + "/v1/auth/users", json={"name": "alice"}, headers=admin)
    assert created.status_code == 200, created.text
    assigned = cluster._http.post(
        base + "/v1/auth/users/alice/roles", json={"role": "team-a"}, headers=admin
    )
    assert assigned.status_code == 200, assigned.text
    alice = cluster.client(token=created.json()["token"])
    held = cluster.client().acquire("b-ledger", "bob", 10)
    with pytest.raises(leasehold.Forbidden) as refused:
        alice.release("b-ledger", held.token)
    assert (refused.value.status, refused.value.permission, refused.value.name) == (
        403,
        "lock",
        "b-ledger",
    )
    assert cluster.client().get("b-ledger").token == held.token, "nothing changed"
    own = alice.acquire("a-job", "alice", 10)
    alice.release("a-job", own.token)


def make_client_cert(
    directory: Path, ca: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, user: str
) -> tuple[str, str]:
    """A client certificate whose subject is ``CN=<user>``, signed by ``ca``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, user)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"client-{user}.pem", directory / f"client-{user}-key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(_pem_key(key))
    key_path.chmod(0o600)
    return str(cert_path), str(key_path)


def test_a_client_certificate_names_the_user(make_cluster, tmp_path):
    """With ``--client-trusted-ca``, ``cert=(certfile, keyfile)`` and no token
    acts as the user of the certificate's Common Name: alice's lock on ``a-``
    works, ``b-`` is Forbidden; a certificate naming no user is Unauthorized."""
    ca_path, ca, ca_key = make_ca(tmp_path, "test-ca")
    node_cert, node_key = make_node_cert(tmp_path, ca, ca_key)
    client_ca_path, client_ca, client_ca_key = make_ca(tmp_path, "client-ca")
    admin_file = tmp_path / "admin-token"
    admin_file.write_text(ADMIN_TOKEN + "\n")
    admin_file.chmod(0o600)
    serve_args = (
        "--admin-token-file", str(admin_file),
        "--tls-cert-file", str(node_cert),
        "--tls-key-file", str(node_key),
        "--ca-file", str(ca_path),
        "--client-trusted-ca", str(client_ca_path),
    )  # fmt: skip
    cluster = make_cluster(serve_args=serve_args, ca_file=str(ca_path), token=ADMIN_TOKEN)
    admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    base = cluster.url(cluster.ids[0])
    for path, body in [
        ("/v1/auth/roles", {"name": "team-a"}),
        ("/v1/auth/roles/team-a/grants", {"permission": "lock", "prefix": "a-"}),
        ("/v1/auth/users", {"name": "alice"}),
        ("/v1/auth/users/alice/roles", {"role": "team-a"}),
    ]:
        reply = cluster._http.post(base + path, json=body, headers=admin)
        assert reply.status_code == 200, reply.text

    alice = leasehold.Client(
        cluster.endpoints(),
        ca_file=str(ca_path),
        cert=make_client_cert(tmp_path, client_ca, client_ca_key, "alice"),
    )
    own = alice.acquire("a-job", "alice", 10)
    alice.release("a-job", own.token)
    with pytest.raises(leasehold.Forbidden) as refused:
        alice.acquire("b-job", "alice", 10)
    assert (refused.value.permission, refused.value.name) == ("lock", "b-job")

    nobody = leasehold.Client(
        cluster.endpoints(),
        ca_file=str(ca_path),
        cert=make_client_cert(tmp_path, client_ca, client_ca_key, "nobody"),
    )
    with pytest.raises(leasehold.Unauthorized) as unknown:
        nobody.acquire("a-job", "nobody", 10)
    assert (unknown.value.status, unknown.value.code) == (401, "unauthenticated")
