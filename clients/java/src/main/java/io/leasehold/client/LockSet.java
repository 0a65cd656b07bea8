package io.leasehold.client;

/**
 * Locks held together under one token until closed.
 *
 * <p>No watchdog renews them: a set is for work that fits in its ttl (check
 * {@link Leases#validUntilNanos}); for longer work take the set under a
 * {@link Session} ({@link Session#lockMany}), whose one watchdog keeps every
 * lock of it.
 */
public final class LockSet implements AutoCloseable {
    private final Client client;
    private final Leases leases;

    LockSet(Client client, Leases leases) {
        this.client = client;
        this.leases = leases;
    }

    public Leases leases() {
        return leases;
    }

    public long token() {
        return leases.token();
    }

    /** Releases every lock of the set in one log entry. */
    @Override
    public void close() {
        client.releaseMany(leases.names(), leases.token());
    }
}
