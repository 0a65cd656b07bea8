package io.leasehold.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * A real leasehold cluster for the tests: {@code leasehold serve} processes
 * on free loopback ports with data in a temporary folder (as the Python
 * client's tests/cluster.py). Every process is tracked by its handle and
 * only those PIDs are ever signalled.
 */
final class TestCluster implements AutoCloseable {
    static final int TICK_MS = 100;
    static final Duration ELECTION_BOUND = Duration.ofSeconds(20);

    private static TestCluster shared;

    /** The cluster most tests share, started once and stopped when the JVM exits. */
    static synchronized TestCluster shared() throws Exception {
        if (shared == null) {
            shared = new TestCluster(3);
            TestCluster started = shared;
            Runtime.getRuntime().addShutdownHook(new Thread(started::close));
        }
        return shared;
    }

    final Path root;
    final List<String> addrs = new ArrayList<>();
    final Map<Integer, Process> procs = new TreeMap<>();
    private final HttpClient probe = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(1))
            .proxy(HttpClient.Builder.NO_PROXY).version(HttpClient.Version.HTTP_1_1).build();

    /** $LEASEHOLD_BIN, else the repo's debug build. */
    static String binary() {
        String bin = System.getenv("LEASEHOLD_BIN");
        return bin != null && !bin.isEmpty() ? bin : Path.of("..", "..", "target", "debug", "leasehold").toString();
    }

    TestCluster(int n) throws Exception {
        root = Files.createTempDirectory("leasehold-java-");
        List<ServerSocket> held = new ArrayList<>();
        try {
            for (int i = 0; i < n; i++) {
                ServerSocket socket = new ServerSocket();
                socket.bind(new InetSocketAddress("127.0.0.1", 0));
                held.add(socket);
                addrs.add("127.0.0.1:" + socket.getLocalPort());
            }
        } finally {
            for (ServerSocket socket : held) {
                socket.close();
            }
        }
        List<String> peers = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            peers.add((i + 1) + "=" + addrs.get(i));
        }
        try {
            for (int node = 1; node <= n; node++) {
                Path data = root.resolve("node" + node);
                Files.createDirectories(data);
                File log = root.resolve("node" + node + ".log").toFile();
                Process process = new ProcessBuilder(binary(), "serve", "--id", String.valueOf(node), "--addr",
                        addrs.get(node - 1), "--data", data.toString(), "--tick-ms", String.valueOf(TICK_MS), "--peers",
                        String.join(",", peers), "--initial-cluster-state", "new")
                        .redirectErrorStream(true).redirectOutput(log).redirectInput(ProcessBuilder.Redirect.from(
                                new File("/dev/null")))
                        .start();
                procs.put(node, process);
            }
            waitForLeader();
        } catch (Exception e) {
            close();
            throw e;
        }
    }

    List<String> endpoints() {
        return List.copyOf(addrs);
    }

    Client client() {
        return Client.builder(endpoints()).retryBudget(Duration.ofSeconds(15)).build();
    }

    private JsonNode status(int node) {
        try {
            HttpRequest request = HttpRequest.newBuilder(URI.create("http://" + addrs.get(node - 1) + "/v1/cluster/status"))
                    .timeout(Duration.ofSeconds(1)).build();
            HttpResponse<byte[]> response = probe.send(request, HttpResponse.BodyHandlers.ofByteArray());
            return response.statusCode() == 200 ? Client.JSON.readTree(response.body()) : null;
        } catch (IOException unreachable) {
            return null;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return null;
        }
    }

    /** Waits until one running node leads, every node that answers agrees, and it has ticked. */
    int waitForLeader() throws InterruptedException {
        long giveUp = System.nanoTime() + ELECTION_BOUND.toNanos();
        while (System.nanoTime() - giveUp < 0) {
            List<Integer> leaders = new ArrayList<>();
            Map<Integer, JsonNode> answered = new TreeMap<>();
            for (int node : procs.keySet()) {
                JsonNode s = status(node);
                if (s != null) {
                    answered.put(node, s);
                    if ("leader".equals(s.path("role").asText())) {
                        leaders.add(node);
                    }
                }
            }
            if (leaders.size() == 1) {
                int leader = leaders.get(0);
                boolean agreed = answered.values().stream().allMatch(s -> s.path("leader").asInt() == leader);
                if (agreed && answered.get(leader).path("tick").asLong() > 0) {
                    return leader;
                }
            }
            Thread.sleep(50);
        }
        throw new AssertionError("no leader within " + ELECTION_BOUND + "\n" + logs());
    }

    /** kill -9 of one node, reaped. */
    void kill(int node) throws InterruptedException {
        Process process = procs.remove(node);
        if (process != null) {
            process.destroyForcibly().waitFor();
        }
    }

    /** SIGSTOP or SIGCONT to every running node, by PID. */
    void signalAll(String signal) throws IOException, InterruptedException {
        for (Process process : procs.values()) {
            new ProcessBuilder("kill", "-" + signal, String.valueOf(process.pid())).inheritIO().start().waitFor();
        }
    }

    String logs() {
        StringBuilder out = new StringBuilder();
        for (int node = 1; node <= addrs.size(); node++) {
            try {
                List<String> lines = Files.readAllLines(root.resolve("node" + node + ".log"));
                out.append("--- node ").append(node).append(" ---\n");
                lines.subList(Math.max(0, lines.size() - 20), lines.size()).forEach(l -> out.append(l).append('\n'));
            } catch (IOException missing) {
                out.append("--- node ").append(node).append(": no log\n");
            }
        }
        return out.toString();
    }

    /** SIGTERM (and SIGCONT, for stopped nodes) to every node, SIGKILL after a grace period; removes the data. */
    @Override
    public void close() {
        try {
            signalAll("CONT");
            for (Process process : procs.values()) {
                process.destroy();
            }
            for (Process process : procs.values()) {
                if (!process.waitFor(5, TimeUnit.SECONDS)) {
                    process.destroyForcibly().waitFor();
                }
            }
        } catch (IOException | InterruptedException e) {
            procs.values().forEach(Process::destroyForcibly);
        }
        procs.clear();
        try (Stream<Path> files = Files.walk(root)) {
            files.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException leftOver) {
            // A temporary folder left behind harms nothing.
        }
    }
}
