"""Shared machinery of the fake coding agents (fake-claude, fake-codex).

Python 3 standard library only. Imported by the two executables next to
this file; it is not an executable itself.

Scenario: the lines of the task text (the first prompt) that look like

    FAKE: <directive> <args...>
    FAKE[<qualifiers>]: <directive> <args...>

(leading spaces, `- ` or `* ` allowed) form the session's *program*; every
other line is ignored. Arguments are split like a shell would (shlex), so
quote text with spaces: `FAKE: question q1 "Which colour?" src/colour.txt`.
Relative paths are relative to the agent's working directory (the task's
worktree). The directives each agent understands are documented at the top
of its script.

Qualifiers (comma-separated) decide whether a directive runs:

    once          only the first time any process of this task reaches it
                  (a marker under $FAKE_AGENT_STATE/once/)
    attempt=N     only when SWARM_ATTEMPT is N
    fresh         only in a process that started a new session
    resumed       only in a process that resumed a session

A directive skipped by its qualifiers is passed over silently.

Sessions. A session remembers its program and a cursor (the next directive).
A process that resumes a session (claude `--resume ID`, codex `exec resume
ID`) continues from the cursor, so work done before a rate limit or a
checkpoint is not done again. Directives that end the process early
(rate-limit, checkpoint, error, crash, exit, ...) move the cursor past
themselves first, so a resumed session goes on after them.

State, in the directory $FAKE_AGENT_STATE (default: a per-user directory
under the system temp dir); every record carries agent, pid, swarm, task,
attempt, worker and time_ms:

    runs.jsonl            one line per process start: argv, cwd, the SWARM_*
                          environment, TRACEPARENT, resume (the session id it
                          was asked to resume, or null), session
    events.jsonl          one line per notable thing: session (started or
                          resumed), permission (tool, input, behavior,
                          message), tool (tool, input, is_error), question,
                          answer, rate_limited (resets_at), result (subtype,
                          is_error, usage, cost), exit (code), stdin_closed
    sessions/<id>.json    the session: program, cursor, processes (pids),
                          resumes (how many times it was resumed), answers
    once/<key>            markers of `once` directives that fired
"""

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import uuid

DIRECTIVE = re.compile(r"^\s*(?:[-*]\s+)?FAKE(?:\[([^\]]*)\])?:\s*(.*?)\s*$")

# Environment the sidecar sets for every worker.
SWARM_ENV = (
    "SWARM_SWARM_ID",
    "SWARM_TASK_ID",
    "SWARM_ATTEMPT",
    "SWARM_WORKER_ID",
    "SWARM_TASK_FILE",
    "SWARM_STATUS_FILE",
    "TRACEPARENT",
    "FAKE_AGENT_STATE",
)

# How long a `gate` waits at most, in seconds.
GATE_LIMIT = 120.0


def now_ms():
    return int(time.time() * 1000)


def parse_program(text):
    """The FAKE: lines of `text`, as [{index, qualifiers, words, raw}]."""
    program = []
    for line in text.splitlines():
        m = DIRECTIVE.match(line)
        if not m:
            continue
        quals = [q.strip() for q in (m.group(1) or "").split(",") if q.strip()]
        try:
            words = shlex.split(m.group(2))
        except ValueError:
            words = m.group(2).split()
        if not words:
            continue
        program.append({"index": len(program), "qualifiers": quals, "words": words, "raw": line.strip()})
    return program


class State:
    """The fake's state directory: logs, sessions, once-markers."""

    def __init__(self, agent):
        self.agent = agent
        self.dir = os.environ.get("FAKE_AGENT_STATE") or os.path.join(
            tempfile.gettempdir(), "fake-agent-state-%d" % os.getuid()
        )
        for sub in ("sessions", "once"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)

    def _stamp(self, record):
        base = {
            "agent": self.agent,
            "pid": os.getpid(),
            "swarm": os.environ.get("SWARM_SWARM_ID", ""),
            "task": os.environ.get("SWARM_TASK_ID", ""),
            "attempt": os.environ.get("SWARM_ATTEMPT", ""),
            "worker": os.environ.get("SWARM_WORKER_ID", ""),
            "time_ms": now_ms(),
        }
        base.update(record)
        return base

    def append(self, name, record):
        line = (json.dumps(self._stamp(record)) + "\n").encode()
        fd = os.open(os.path.join(self.dir, name), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def event(self, what, **fields):
        fields["event"] = what
        self.append("events.jsonl", fields)

    def session_path(self, sid):
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", sid)
        return os.path.join(self.dir, "sessions", safe + ".json")

    def load_session(self, sid):
        try:
            with open(self.session_path(sid)) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def save_session(self, session):
        path = self.session_path(session["session_id"])
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as f:
            json.dump(session, f, indent=1)
        os.replace(tmp, path)

    def new_session(self, sid):
        return {
            "session_id": sid,
            "agent": self.agent,
            "swarm": os.environ.get("SWARM_SWARM_ID", ""),
            "task": os.environ.get("SWARM_TASK_ID", ""),
            "created_attempt": os.environ.get("SWARM_ATTEMPT", ""),
            "created_ms": now_ms(),
            "program": None,
            "cursor": 0,
            "processes": [],
            "resumes": 0,
            "answers": {},
            "finished": False,
        }

    def once(self, key):
        """True the first time `key` is claimed, across processes."""
        safe = re.sub(r"[^A-Za-z0-9._-]", "_", key)
        try:
            fd = os.open(os.path.join(self.dir, "once", safe), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        os.close(fd)
        return True


def applies(state, directive, resumed):
    """Whether `directive`'s qualifiers let it run in this process."""
    for q in directive["qualifiers"]:
        if q == "fresh" and resumed:
            return False
        if q == "resumed" and not resumed:
            return False
        if q.startswith("attempt="):
            if os.environ.get("SWARM_ATTEMPT", "") != q.split("=", 1)[1]:
                return False
    if "once" in directive["qualifiers"]:
        key = "%s-%s-%s-%d" % (
            state.agent,
            os.environ.get("SWARM_SWARM_ID", ""),
            os.environ.get("SWARM_TASK_ID", ""),
            directive["index"],
        )
        return state.once(key)
    return True


def log_run(state, argv, resume, session_id):
    env = {k: os.environ[k] for k in SWARM_ENV if k in os.environ}
    state.append(
        "runs.jsonl",
        {"argv": argv, "cwd": os.getcwd(), "env": env, "resume": resume, "session": session_id},
    )


def resolve(path):
    """An absolute path for a directive's path argument."""
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def write_status(status, message="", question=None, progress=None):
    """Writes $SWARM_STATUS_FILE (default .swarm/status.json) atomically."""
    path = os.environ.get("SWARM_STATUS_FILE") or os.path.join(".swarm", "status.json")
    path = resolve(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    body = {"status": status, "message": message}
    if question is not None:
        body["question"] = question
    if progress is not None:
        body["progress"] = progress
    tmp = path + ".fake.tmp"
    with open(tmp, "w") as f:
        json.dump(body, f)
    os.replace(tmp, path)


def wait_for_file(path, limit=GATE_LIMIT):
    deadline = time.time() + limit
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)
    return os.path.exists(path)


def run_shell(command, timeout=60):
    """Really runs `command` with sh -c in the working directory."""
    try:
        p = subprocess.run(
            ["sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
        )
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return 124, "", "timed out after %ss" % timeout


def todos(spec):
    """`D/T` → T todo items of which D are completed and the next in progress."""
    done, total = (int(x) for x in spec.split("/", 1))
    items = []
    for i in range(total):
        status = "completed" if i < done else ("in_progress" if i == done else "pending")
        items.append({"n": i + 1, "status": status})
    return items


def die(message, code=1):
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    sys.exit(code)


def new_id():
    return str(uuid.uuid4())
