#!/usr/bin/env bash
# Builds the Java client offline (build.sh: javac -Xlint:all -Werror with
# Debian's Jackson and JUnit 5 jars) and runs its JUnit 5 tests with the
# console launcher. The tests start real `leasehold serve` processes from
# $LEASEHOLD_BIN, else ../../target/debug/leasehold (run `cargo build`
# first). Extra arguments go to the console launcher, e.g.
# `./run-tests.sh --select-method io.leasehold.client.ClientTest#multiLockIsAllOrNone`
# (without them, every test class is run).
set -euo pipefail
cd "$(dirname "$0")"

libs=${JAVA_LIBS:-/usr/share/java}
./build.sh
echo "== JUnit 5"
export LEASEHOLD_BIN=${LEASEHOLD_BIN:-$PWD/../../target/debug/leasehold}
selection=("$@")
[ "${#selection[@]}" -gt 0 ] || selection=(--scan-class-path build/test-classes)
java -jar "$libs/junit-platform-console-standalone.jar" \
    --class-path "build/test-classes:build/classes:$libs/jackson-databind.jar:$libs/jackson-core.jar:$libs/jackson-annotations.jar" \
    --disable-banner --disable-ansi-colors --details=tree --fail-if-no-tests "${selection[@]}"
