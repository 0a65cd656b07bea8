#!/usr/bin/env bash
# Builds the Java client offline, with javac and the jars Debian installs in
# /usr/share/java (libjackson2-databind-java; junit5 for the tests): Maven
# Central is not reachable from the machines this repo is tested on. Users
# with Maven build the same sources with pom.xml.
#
# Makes build/leasehold-client-<version>.jar, the conformance driver's
# classes (build/driver) and the tests' (build/test-classes), all with
# `javac -Xlint:all -Werror`. $JAVA_LIBS overrides /usr/share/java.
set -euo pipefail
cd "$(dirname "$0")"

libs=${JAVA_LIBS:-/usr/share/java}
version=$(sed -n '/<artifactId>leasehold-client</{n;s|.*<version>\(.*\)</version>.*|\1|p;}' pom.xml)
jackson="$libs/jackson-databind.jar:$libs/jackson-core.jar:$libs/jackson-annotations.jar"
junit="$libs/junit-jupiter-api.jar:$libs/junit-platform-commons.jar:$libs/opentest4j.jar:$libs/apiguardian-api.jar"
for jar in ${jackson//:/ } ${junit//:/ }; do
    [ -f "$jar" ] || { echo "build.sh: missing $jar (apt-get install libjackson2-databind-java junit5)" >&2; exit 1; }
done

rm -rf build
javac_=(javac --release 17 -Xlint:all -Werror -encoding UTF-8)
echo "== javac (client)"
"${javac_[@]}" -cp "$jackson" -d build/classes $(find src/main/java -name '*.java')
jar --create --file "build/leasehold-client-$version.jar" -C build/classes .
echo "== javac (conformance driver)"
"${javac_[@]}" -cp "build/classes:$jackson" -d build/driver $(find src/driver/java -name '*.java')
echo "== javac (tests)"
"${javac_[@]}" -cp "build/classes:$jackson:$junit" -d build/test-classes $(find src/test/java -name '*.java')
cp -r src/test/resources/. build/test-classes/
