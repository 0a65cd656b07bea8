package io.leasehold.client;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.Locale;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Relays TCP connections to one node and injects the faults the client
 * must survive: an answer the node sent but the client never gets (the
 * connection closes instead), and a 503 overloaded with Retry-After
 * answered in the node's place.
 */
final class FaultProxy implements AutoCloseable {
    private final ServerSocket listener;
    private final String targetHost;
    private final int targetPort;
    /** This many of the node's next answers are cut off. */
    final AtomicInteger dropAnswers = new AtomicInteger();
    /** This many of the next connections are answered 503. */
    final AtomicInteger overloaded = new AtomicInteger();
    /** Requests the proxy answered 503 itself. */
    final AtomicInteger refused = new AtomicInteger();

    FaultProxy(String target) throws IOException {
        listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
        targetHost = target.substring(0, target.lastIndexOf(':'));
        targetPort = Integer.parseInt(target.substring(target.lastIndexOf(':') + 1));
        daemon(() -> {
            while (!listener.isClosed()) {
                try {
                    Socket client = listener.accept();
                    daemon(() -> serve(client));
                } catch (IOException closed) {
                    return;
                }
            }
        });
    }

    String addr() {
        return "127.0.0.1:" + listener.getLocalPort();
    }

    private static void daemon(Runnable task) {
        Thread thread = new Thread(task, "fault proxy");
        thread.setDaemon(true);
        thread.start();
    }

    private void serve(Socket client) {
        try (client) {
            if (overloaded.getAndDecrement() > 0) {
                // Read the whole request first, so that the client reads the
                // answer rather than a reset.
                readRequest(client.getInputStream());
                String body = "{\"error\":{\"code\":\"overloaded\",\"message\":\"injected by the test's proxy\"}}";
                String answer = "HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-type: application/json\r\n"
                        + "content-length: " + body.length() + "\r\nconnection: close\r\n\r\n" + body;
                client.getOutputStream().write(answer.getBytes(StandardCharsets.UTF_8));
                refused.incrementAndGet();
                return;
            }
            overloaded.incrementAndGet(); // undo: this connection is relayed
            try (Socket node = new Socket(targetHost, targetPort)) {
                daemon(() -> relay(client, node));
                InputStream answers = node.getInputStream();
                OutputStream out = client.getOutputStream();
                byte[] buffer = new byte[64 << 10];
                for (int n = answers.read(buffer); n >= 0; n = answers.read(buffer)) {
                    if (dropAnswers.getAndDecrement() > 0) {
                        return; // the node answered; the client never hears it
                    }
                    dropAnswers.incrementAndGet();
                    out.write(buffer, 0, n);
                    out.flush();
                }
            }
        } catch (IOException closed) {
            // Either side went away: so does the relay.
        }
    }

    private static void relay(Socket from, Socket to) {
        try {
            from.getInputStream().transferTo(to.getOutputStream());
        } catch (IOException closed) {
            // Either side went away.
        } finally {
            try {
                to.close();
            } catch (IOException ignored) {
                // Already closed.
            }
        }
    }

    /** Reads one request: its head up to the blank line, then content-length bytes of body. */
    private static void readRequest(InputStream in) throws IOException {
        ByteArrayOutputStream head = new ByteArrayOutputStream();
        while (!head.toString(StandardCharsets.ISO_8859_1).endsWith("\r\n\r\n")) {
            int b = in.read();
            if (b < 0) {
                return;
            }
            head.write(b);
        }
        for (String line : head.toString(StandardCharsets.ISO_8859_1).split("\r\n")) {
            if (line.toLowerCase(Locale.ROOT).startsWith("content-length:")) {
                in.readNBytes(Integer.parseInt(line.substring("content-length:".length()).trim()));
            }
        }
    }

    @Override
    public void close() throws IOException {
        listener.close();
    }
}
