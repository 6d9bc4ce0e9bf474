#!/bin/sh
# The demo's scripted worker. swarm runs it in the task's worktree; it picks
# its behaviour from $SWARM_TASK_ID and $SWARM_ATTEMPT, like a real agent
# would pick its work from $SWARM_TASK_FILE. Uncommitted changes are
# committed by the sidecar.
set -eu

mkdir -p "$(dirname "$SWARM_STATUS_FILE")"

# status STATUS PERCENT STEP
status() {
    printf '{"status":"%s","message":"%s","progress":{"percent":%s,"step":"%s"}}\n' \
        "$1" "$3" "$2" "$3" > "$SWARM_STATUS_FILE"
    echo "[$SWARM_TASK_ID#$SWARM_ATTEMPT] $2% $3"
}

# work PERCENT STEP: report progress, then "think" for a moment.
work() {
    status working "$1" "$2"
    sleep 0.4
}

# wait_for FILE: bounded wait for another worker's marker.
wait_for() {
    n=0
    while [ ! -e "$1" ] && [ "$n" -lt 150 ]; do
        sleep 0.1
        n=$((n + 1))
    done
}

changelog() {
    # Both `license` and `makefile` add a line at the end of CHANGELOG.md:
    # when they run side by side, whichever merges second conflicts and is
    # handed back to its worker, starting from the new integration head.
    work 30 "writing $1"
    echo "- $2" >> CHANGELOG.md
    if [ "$SWARM_ATTEMPT" = 1 ]; then
        touch "$DEMO_SYNC/$SWARM_TASK_ID.started"
        work 60 "waiting for the other CHANGELOG writer"
        wait_for "$DEMO_SYNC/$3.started"
    else
        work 60 "re-applied CHANGELOG entry on the new integration head"
    fi
}

case "$SWARM_TASK_ID" in
scaffold)
    work 20 "laying out src/"
    mkdir -p src
    cat > src/calc.sh <<'SH'
#!/bin/sh
# calc: evaluates simple arithmetic expressions, e.g. `calc.sh "1 + 2 * 3"`.
here=$(dirname "$0")
for part in config lexer parser eval; do
    [ -f "$here/$part.sh" ] && . "$here/$part.sh"
done
evaluate "$*"
SH
    work 80 "wrote src/calc.sh"
    ;;
license)
    changelog LICENSE "add the Apache-2.0 license" makefile
    echo "Apache License 2.0 (demo)" > LICENSE
    ;;
makefile)
    changelog Makefile "add a Makefile with a test target" license
    printf 'test:\n\tsh src/calc.sh "1 + 2"\n' > Makefile
    ;;
lexer)
    if [ "$SWARM_ATTEMPT" = 1 ]; then
        work 25 "tokenizer: numbers"
        mkdir -p src
        printf '# lexer, part 1: numbers\ntokenize() { echo "$1" | tr -s " " "\\n"; }\n' > src/lexer.sh
        work 50 "checkpoint: half done, saving WIP"
        exit 2
    fi
    # Resumed from the WIP commit: part 1 must already be here.
    grep -q "part 1" src/lexer.sh || { echo "WIP commit missing" >&2; exit 1; }
    work 75 "resumed from WIP commit; tokenizer: operators"
    printf '# lexer, part 2: operators\nis_operator() { case "$1" in [-+*/]) return 0;; esac; return 1; }\n' >> src/lexer.sh
    ;;
parser)
    work 30 "writing the parser"
    mkdir -p src
    printf '# parser\nparse() { tokenize "$1"; }\n' > src/parser.sh
    if [ "$SWARM_ATTEMPT" = 1 ]; then
        work 60 "running parser tests"
        echo "parser tests: 2 of 5 failed (precedence)" >&2
        exit 1
    fi
    work 70 "fixed operator precedence; tests pass"
    ;;
config)
    if [ "$SWARM_ATTEMPT" = 1 ]; then
        work 40 "choosing defaults"
        cat > "$SWARM_STATUS_FILE" <<'JSON'
{"status":"question","message":"need a decision","question":{"id":"precision","text":"How many decimal places should calc print by default?","category":"design"}}
JSON
        echo "[config#1] asking the operator: how many decimal places?"
        exit 4
    fi
    answer=$(grep -i -o "[0-9][0-9]* decimal places" "$SWARM_TASK_FILE" | head -n 1 || true)
    digits=${answer%% *}
    [ -n "$digits" ] || digits=2
    work 60 "operator answered: $digits decimal places"
    mkdir -p src
    printf '# config (precision chosen by the operator)\nPRECISION=%s\n' "$digits" > src/config.sh
    ;;
eval)
    work 30 "wiring lexer and parser"
    mkdir -p src
    printf '# eval\nevaluate() { echo "scale=${PRECISION:-2}; $1" | bc; }\n' > src/eval.sh
    work 70 "evaluator done"
    ;;
docs)
    work 40 "writing docs/usage.md"
    mkdir -p docs
    printf '# Using calc\n\n    sh src/calc.sh "1 + 2 * 3"\n\nPrecision: see src/config.sh.\n' > docs/usage.md
    ;;
*)
    echo "unknown demo task $SWARM_TASK_ID" >&2
    exit 1
    ;;
esac
status done 100 "done"
exit 0
