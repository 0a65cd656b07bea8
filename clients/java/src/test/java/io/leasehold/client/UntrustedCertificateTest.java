package io.leasehold.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsServer;
import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A node whose certificate the TLS handshake refuses (no cluster: a local
 * https server with a self-signed certificate made by {@code keytool}). With
 * an hour's retry budget, a call that retried would run into the timeout.
 */
@Timeout(60)
class UntrustedCertificateTest {
    private static final char[] PASSWORD = "leasehold".toCharArray();

    @TempDir
    Path dir;

    private HttpsServer server;
    /** Requests the server's handler got: none may get past the handshake. */
    private final AtomicInteger requests = new AtomicInteger();

    /** A self-signed certificate for {@code san}, in a PKCS#12 key store. */
    private KeyStore selfSigned(String san) throws Exception {
        Path store = dir.resolve("node.p12");
        String keytool = Path.of(System.getProperty("java.home"), "bin", "keytool").toString();
        Process made = new ProcessBuilder(keytool, "-genkeypair", "-noprompt", "-alias", "node", "-keyalg", "EC",
                "-groupname", "secp256r1", "-dname", "CN=leasehold test node", "-ext", "san=" + san, "-validity", "2",
                "-storetype", "PKCS12", "-keystore", store.toString(), "-storepass", new String(PASSWORD))
                .redirectErrorStream(true).redirectOutput(dir.resolve("keytool.log").toFile()).start();
        assertTrue(made.waitFor(30, TimeUnit.SECONDS), "keytool did not finish");
        assertEquals(0, made.exitValue(), () -> "keytool failed: " + log());
        KeyStore keyStore = KeyStore.getInstance("PKCS12");
        try (InputStream in = Files.newInputStream(store)) {
            keyStore.load(in, PASSWORD);
        }
        return keyStore;
    }

    private String log() {
        try {
            return Files.readString(dir.resolve("keytool.log"));
        } catch (IOException e) {
            return e.toString();
        }
    }

    /** Starts an https server on 127.0.0.1 presenting {@code keys}' certificate; it counts the requests. */
    private void serve(KeyStore keys) throws IOException, GeneralSecurityException {
        KeyManagerFactory managers = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        managers.init(keys, PASSWORD);
        SSLContext tls = SSLContext.getInstance("TLS");
        tls.init(managers.getKeyManagers(), null, null);
        server = HttpsServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.setHttpsConfigurator(new HttpsConfigurator(tls));
        server.createContext("/", exchange -> {
            requests.incrementAndGet();
            exchange.sendResponseHeaders(500, -1);
            exchange.close();
        });
        server.start();
    }

    private String endpoint() {
        return "https://127.0.0.1:" + server.getAddress().getPort();
    }

    @AfterEach
    void stopServer() {
        if (server != null) {
            server.stop(0);
        }
    }

    private void assertThrownAtOnce(Client client) {
        UnavailableException failure = assertThrows(UnavailableException.class, () -> client.get("n"));
        assertTrue(failure.getMessage().contains("certificate"), failure.getMessage());
        assertEquals(0, requests.get());
    }

    // Ensures a certificate that does not chain to a trusted CA (here the
    // default trust store) is thrown at once, not retried for an hour.
    @Test
    void certificateOfAnUntrustedIssuerIsNotRetried() throws Exception {
        KeyStore keys = selfSigned("ip:127.0.0.1");
        serve(keys);
        assertThrownAtOnce(Client.builder(List.of(endpoint())).retryBudget(Duration.ofHours(1)).build());
    }

    // Ensures a trusted certificate that names another host is thrown at
    // once too, not retried for an hour.
    @Test
    void certificateOfAnotherHostIsNotRetried() throws Exception {
        KeyStore keys = selfSigned("dns:other.example");
        serve(keys);
        TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
        trust.init(keys);
        SSLContext tls = SSLContext.getInstance("TLS");
        tls.init(null, trust.getTrustManagers(), null);
        assertThrownAtOnce(Client.builder(List.of(endpoint())).sslContext(tls).retryBudget(Duration.ofHours(1)).build());
    }
}
