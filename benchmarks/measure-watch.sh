#!/bin/bash
# Latency of `pi-course watch` by hand (benchmarks/README.md, "Watch"): key h -> hint on screen, and an
# outside `pi-course reset` during a run -> its rerun on screen. Needs tmux and a fresh folder:
#   pi-course practice 01 /tmp/w01 && benchmarks/measure-watch.sh [SESSION]
S=${1:-w}
now() { date +%s.%N; }
seen() { tmux capture-pane -p -t $S | grep -q -- "$1"; }
lastis() { tmux capture-pane -p -t $S | grep -E "^(Lab [0-9.]+ ·|every lab is done)" | tail -1 | grep -q -- "$1"; }
waitfor() { local t0=${2:-$(now)}; while ! ${CHECK:-seen} "$1"; do sleep 0.05; if (( $(echo "$(now) - $t0 > 180" | bc) )); then echo "TIMEOUT $1"; return 1; fi; done; echo "$(now) - $t0" | bc; }
W=$(cd "$(dirname "$0")/.." && pwd)
tmux kill-session -t $S 2>/dev/null
tmux new -d -s $S -x 220 -y 50
tmux send-keys -t $S "cd /tmp/w01 && . $W/.venv/bin/activate && export XDG_CACHE_HOME=${XDG_CACHE_HOME:-$HOME/.cache} PI_COURSE_LANG=en && pi-course watch" Enter
echo "first screen s: $(waitfor 'keys: h hint')"
uptime
# a save starts a run; 1 s later (after the debounce) press h twice during that run
TS=$(now); echo "# note" >> /tmp/w01/pi_course/survival/events.py
sleep 1
tmux send-keys -t $S h
echo "key h -> hint 1/3 s: $(waitfor 'hint 1/3 for Lab 1.1')"
tmux send-keys -t $S h
echo "key h -> hint 2/3 s: $(waitfor 'hint 2/3 for Lab 1.1')"
# every lab green, then an outside reset during a run
cp $W/solutions/01-typescript-survival/pi_course/survival/events.py /tmp/w01/pi_course/survival/events.py
echo "solution -> done screen s: $(waitfor 'every lab is done')"
tmux clear-history -t $S
TS=$(now); echo "# note" >> /tmp/w01/pi_course/survival/events.py
sleep 1
lastis '^Lab 1\.1 ·' && echo "BAD: Lab 1.1 already on screen"
T0=$(now)
(cd /tmp/w01 && . $W/.venv/bin/activate && XDG_CACHE_HOME=${XDG_CACHE_HOME:-$HOME/.cache} PI_COURSE_LANG=en pi-course reset 1.1 >/dev/null 2>&1; echo "reset command itself took s: $(echo "$(now) - $T0" | bc)") &
echo "outside reset (started during a run) -> Lab 1.1 screen s: $(CHECK=lastis waitfor '^Lab 1\.1 ·' $T0)"
wait
uptime
tmux send-keys -t $S q
sleep 3
tmux capture-pane -p -t $S | tail -5
tmux kill-session -t $S
