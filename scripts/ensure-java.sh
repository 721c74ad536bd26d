#!/bin/sh
# Spark (pyspark) needs a Java runtime, 17 or newer. `make install` runs this: with
# one on PATH it does nothing; as root on Debian/Ubuntu it installs
# openjdk-17-jre-headless from the distribution; otherwise it says what to install
# and exits 2, so that `make test` can never pass with the Spark tests left out.
set -eu

java_major() {
    # `java -version` prints e.g. 'openjdk version "17.0.15" 2025-04-15' on stderr
    java -version 2>&1 | sed -n 's/.*version "\([0-9][0-9]*\).*/\1/p' | head -n 1
}

if command -v java >/dev/null 2>&1; then
    major=$(java_major)
    if [ -n "$major" ] && [ "$major" -ge 17 ]; then
        exit 0
    fi
    echo "ensure-java: java on PATH is version '${major:-unknown}'; Spark needs 17 or newer" >&2
fi

if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-java: installing openjdk-17-jre-headless (Spark needs a Java runtime)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null
    hash -r
    if command -v java >/dev/null 2>&1 && [ "$(java_major)" -ge 17 ]; then
        exit 0
    fi
    echo "ensure-java: openjdk-17-jre-headless was installed but java 17+ is still not on PATH" >&2
    exit 2
fi

echo "ensure-java: Spark needs a Java runtime (17 or newer) on PATH: install openjdk-17-jre-headless (Debian/Ubuntu) or another JDK 17+, then run make again" >&2
exit 2
