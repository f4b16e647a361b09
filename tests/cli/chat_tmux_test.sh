#!/usr/bin/env bash
# `cera chat` through a real terminal: two turns, Ctrl-C during a long reply (the reply stops, the
# prompt comes back, the chat goes on), /save, /exit; then Ctrl-C at an empty prompt leaves cleanly.
# Usage: chat_tmux_test.sh CERA_BINARY MODEL.gguf. Exit 77 (skipped) without tmux.
set -u
CERA=${1:?cera binary}
MODEL=${2:?model}
command -v tmux >/dev/null || { echo "tmux not installed: skipped"; exit 77; }

SOCK="cera-chat-test-$$"
T=(tmux -L "$SOCK" -f /dev/null)  # a private server: never touches the user's tmux
TMP=$(mktemp -d)
cleanup() { "${T[@]}" kill-server >/dev/null 2>&1; rm -rf "$TMP"; }
trap cleanup EXIT

fail() {
  echo "FAIL: $*"
  echo "----- pane -----"
  pane
  echo "----------------"
  exit 1
}
pane() { "${T[@]}" capture-pane -p -J -S - -t "$S" 2>/dev/null; }
prompts() { pane | grep -c '^> ' || true; }
# wait_until TIMEOUT_S COMMAND...: polls every 0.1 s.
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}
prompts_at_least() { (($(prompts) >= $1)); }
pane_has() { pane | grep -qF -- "$1"; }
pane_longer_than() { (($(pane | wc -c) > $1)); }
send_line() { "${T[@]}" send-keys -t "$S" -l -- "$1" && "${T[@]}" send-keys -t "$S" Enter; }

# Each start opens a new session and leaves the old one alive: killing the server's last session makes
# the server exit, and a new-session racing that exit fails with "server exited unexpectedly".
N_STARTS=0
start() {
  N_STARTS=$((N_STARTS + 1))
  S="chat$N_STARTS"
  "${T[@]}" new-session -d -s "$S" -x 150 -y 40 \
    "'$CERA' chat -m '$MODEL' --temp 0 -n 40 -t 2 -c 8192; echo \"CHAT-EXITED rc=\$?\"; sleep 60" ||
    fail "tmux could not start"
  wait_until 15 prompts_at_least 1 || fail "no prompt after start"
}

start
# Turn 1: a short reply, then the prompt again.
send_line "Tell me a story about a cat."
wait_until 15 prompts_at_least 2 || fail "turn 1: no prompt after the reply"
reply1=$(pane | sed -n '/^> Tell me a story about a cat\./,/^> /p' | sed '1d;$d' | tr -d '[:space:]')
[ -n "$reply1" ] || fail "turn 1: empty reply"

# Turn 2: a reply far longer than the time we wait, stopped with Ctrl-C once it is streaming.
send_line "/set n 6000" && wait_until 5 pane_has "[n = 6000]" || fail "/set n"
send_line "/set ignore-eos on" && wait_until 5 pane_has "[ignore-eos = on]" || fail "/set ignore-eos"
n_before=$(prompts)
send_line "And then what happened?"
base=$(pane | wc -c)
wait_until 15 pane_longer_than $((base + 200)) || fail "turn 2: the reply did not stream"
"${T[@]}" send-keys -t "$S" C-c
wait_until 10 pane_has "[reply stopped]" || fail "turn 2: Ctrl-C did not stop the reply"
wait_until 5 prompts_at_least $((n_before + 1)) || fail "turn 2: no prompt after Ctrl-C"
pane_has "CHAT-EXITED" && fail "Ctrl-C during a reply ended the chat"

# Turn 3: the conversation goes on after the interruption.
send_line "/set n 10" && send_line "/set ignore-eos off" && wait_until 5 pane_has "[ignore-eos = off]" || fail "/set"
n_before=$(prompts)
send_line "Thanks."
wait_until 15 prompts_at_least $((n_before + 1)) || fail "turn 3: no prompt after the reply"
send_line "/save $TMP/conv.json"
wait_until 5 pane_has "[saved to $TMP/conv.json]" || fail "/save"
python3 - "$TMP/conv.json" <<'PY' || fail "saved conversation is wrong"
import json, sys
m = json.load(open(sys.argv[1]))["messages"]
roles = [x["role"] for x in m]
assert roles == ["user", "assistant"] * 3, roles
assert m[0]["content"] == "Tell me a story about a cat.", m[0]
assert m[2]["content"] == "And then what happened?", m[2]
assert all(x["content"] for x in m if x["role"] == "assistant"), m
PY
send_line "/exit"
wait_until 5 pane_has "CHAT-EXITED rc=0" || fail "/exit did not leave with status 0"

# Ctrl-C at the prompt leaves cleanly too.
start
"${T[@]}" send-keys -t "$S" C-c
wait_until 5 pane_has "CHAT-EXITED rc=0" || fail "Ctrl-C at the prompt did not leave with status 0"

# Ctrl-D (end of input) as well.
start
"${T[@]}" send-keys -t "$S" C-d
wait_until 5 pane_has "CHAT-EXITED rc=0" || fail "Ctrl-D at the prompt did not leave with status 0"
echo "chat tmux test: passed"
