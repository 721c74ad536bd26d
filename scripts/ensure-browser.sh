#!/bin/sh
# The browser tests (tests/browser: the web console) drive Debian's chromium through
# chromium-driver. `make install` runs this: with both on PATH it does nothing; as
# root on Debian/Ubuntu it installs them from the distribution (nothing else is
# downloaded: selenium is told to stay offline); otherwise it says what to install
# and exits 2, so that `make test` can never pass with the browser tests left out.
set -eu

have() { command -v "$1" >/dev/null 2>&1; }

if have chromium && have chromedriver; then
    exit 0
fi

if [ "$(id -u)" = "0" ] && have apt-get; then
    echo "ensure-browser: installing chromium and chromium-driver (the web console's browser tests)" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null
    hash -r
    if have chromium && have chromedriver; then
        exit 0
    fi
    echo "ensure-browser: chromium and chromium-driver were installed but are still not on PATH" >&2
    exit 2
fi

echo "ensure-browser: the browser tests need chromium and chromedriver on PATH: install Debian's chromium and chromium-driver (apt-get install chromium chromium-driver, as root), then run make again" >&2
exit 2
