# smoke-lib.sh: the helpers smoke.sh and smoke-qemu.sh share. Sourced, not run.
#
# The sourcing script sets SMOKE (its name, for messages) before sourcing, and
# as it goes: TMP (its temporary directory, holding launcher.log and
# events.log), SOCK (the launcher's command socket), LAUNCHER_PID, SUB_PID and
# SUB_FD_OPEN (whether fd 7, the subscriber's input, is open).

fail() {
    echo "$SMOKE: FAIL: $*" >&2
    if [ -n "$TMP" ] && [ -s "$TMP/launcher.log" ]; then
        echo "$SMOKE: last lines of the launcher's log:" >&2
        tail -n 20 "$TMP/launcher.log" | cut -c1-400 | sed 's/^/    /' >&2
    fi
    exit 1
}

ok() { echo "ok   $*"; }

# contains TEXT FRAGMENT: whether TEXT contains FRAGMENT literally.
contains() { [[ "$1" == *"$2"* ]]; }

# expect WHAT TEXT FRAGMENT...: fails unless TEXT contains every FRAGMENT.
expect() {
    local what=$1 text=$2
    shift 2
    local fragment
    for fragment in "$@"; do
        contains "$text" "$fragment" || fail "$what: expected $fragment in: ${text:0:800}"
    done
}

# resolve_binary [PATH_TO_BINARY]: sets BIN to the absolute path of the
# launcher: the argument, or target/release/virt-launcher under ROOT, built
# with cargo when missing.
resolve_binary() {
    if [ $# -gt 1 ]; then
        echo "usage: $0 [PATH_TO_BINARY]" >&2
        exit 2
    fi
    if [ $# -eq 1 ]; then
        BIN=$1
        [ -x "$BIN" ] || fail "$BIN is not an executable file"
    else
        BIN=$ROOT/target/release/virt-launcher
        if [ ! -x "$BIN" ]; then
            echo "$SMOKE: $BIN is missing; running cargo build --release" >&2
            (cd "$ROOT" && cargo build --release) || fail "cargo build --release failed"
        fi
    fi
    BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
}

# request_within TIMEOUT LINE...: sends the lines on one connection, waiting
# up to TIMEOUT seconds for the replies; prints every line the server wrote
# (the greeting first).
request_within() {
    local wait=$1
    shift
    printf '%s\n' "$@" | socat -t "$wait" - "UNIX-CONNECT:$SOCK" \
        || fail "socat could not talk to $SOCK"
}

# request LINE...: request_within 5 seconds.
request() { request_within 5 "$@"; }

# reply LINE [TIMEOUT]: sends one request; prints its reply line (without
# the greeting).
reply() {
    request_within "${2:-5}" "$1" | sed -n 2p
}

# start_subscriber: connects a subscriber in the background (its events go
# to $TMP/events.log, its input is fd 7) and waits up to 5 s for the reply to
# its subscribe command, the log's second line.
start_subscriber() {
    mkfifo "$TMP/subscriber.in"
    socat - "UNIX-CONNECT:$SOCK" <"$TMP/subscriber.in" >"$TMP/events.log" 2>"$TMP/subscriber.err" &
    SUB_PID=$!
    exec 7>"$TMP/subscriber.in"
    SUB_FD_OPEN=1
    echo '{"execute":"subscribe","id":"sub"}' >&7
    for _ in $(seq 100); do
        grep -q '"id":"sub"}' "$TMP/events.log" 2>/dev/null && break
        sleep 0.05
    done
}

# seen FRAGMENT...: whether the subscriber got an event line with every FRAGMENT.
seen() {
    local line fragment all
    while IFS= read -r line; do
        all=1
        for fragment in "$@"; do
            contains "$line" "$fragment" || { all=0; break; }
        done
        [ "$all" = 1 ] && return 0
    done < <(grep -E '^[{]("seq":[0-9]+,)?"event":' "$TMP/events.log" || true)
    return 1
}

# wait_event SECONDS FRAGMENT...: waits for such an event line; gives up
# early when the launcher has exited.
wait_event() {
    local seconds=$1
    shift
    local i
    for i in $(seq $((seconds * 5))); do
        seen "$@" && return 0
        [ $((i % 25)) = 0 ] && ! kill -0 "$LAUNCHER_PID" 2>/dev/null && return 1
        sleep 0.2
    done
    seen "$@"
}

# sigterm_and_expect_clean_exit SECONDS: sends SIGTERM to the launcher; fails
# unless it exits with status 0 within SECONDS and removes its socket and lock
# file. Then closes the subscriber's input and lets socat finish, so that
# events.log holds every event the subscriber got. Sets STOPPED_AFTER to the
# whole seconds from SIGTERM to exit.
sigterm_and_expect_clean_exit() {
    local seconds=$1 t0 rc=0
    kill -TERM "$LAUNCHER_PID"
    t0=$(date +%s)
    for _ in $(seq $((seconds * 10))); do
        kill -0 "$LAUNCHER_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$LAUNCHER_PID" 2>/dev/null && fail "the launcher did not exit within $seconds s of SIGTERM"
    wait "$LAUNCHER_PID" || rc=$?
    LAUNCHER_PID=""
    STOPPED_AFTER=$(($(date +%s) - t0))
    [ "$rc" -eq 0 ] || fail "the launcher exited with status $rc after SIGTERM, expected 0"

    [ ! -e "$SOCK" ] || fail "launcher-sock still exists after exit"
    [ ! -e "$SOCK.lock" ] || fail "launcher-sock.lock still exists after exit"

    # The server closed the subscriber's connection; let socat finish.
    exec 7>&-
    SUB_FD_OPEN=0
    for _ in $(seq 100); do
        kill -0 "$SUB_PID" 2>/dev/null || break
        sleep 0.05
    done
}
