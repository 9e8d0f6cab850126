#!/usr/bin/env python3
"""PreToolUse hook: the agent may not change the frozen files.

Frozen (relative to the project root): harness/, model/, goals.json, assets/, results.tsv,
leaderboard.md, .claude/. The harness scripts themselves still write results.tsv, leaderboard.md
and profiles when the agent runs them (`python harness/run_experiment.py ...` is allowed); what is
refused is the agent changing those files with its own tools:
  - Edit / Write (tool_input.file_path) and NotebookEdit (tool_input.notebook_path)
    on a frozen path, symlinks resolved;
  - Bash commands that would modify one: redirections (>, >>, &>), tee, rm/mv/cp/ln/install/
    touch/truncate/chmod/mkdir/dd of=, sed -i, perl -i, awk -i inplace, editors, find -delete /
    -exec, patch and git apply, git checkout/restore/reset/clean/stash/commit and other history
    rewrites, python/perl/node one-liners that write, bash -c / eval strings (checked
    recursively), and `run_experiment.py --rebaseline` (a person's decision).
For the model-optimizer subagent (payload agent_type "model-optimizer", or this script run with
--only-candidate from the subagent's own frontmatter hook) the edit tools may touch the candidate
file (goals.json "candidate", optimize.py) and nothing else.
Reads (cat, grep, sed -n, git diff/log/show, python harness/*.py) pass. This is a pragmatic pattern
list, not a sandbox: run_experiment's frozen-hash check is the backstop.

A refusal is exit code 2 with the reason on stderr (Claude Code blocks the tool call and shows
the reason to Claude). A person who means to change frozen files (retargeting) starts Claude
Code with AUTO_OPTIM_UNFREEZE=1 in its environment.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _hooklib import FROZEN, candidate_name, project_root, read_payload, unfrozen  # noqa: E402

OPTIMIZER_AGENT = "model-optimizer"

# The file tools of Claude Code 2.1.330 (MultiEdit is gone; Grep and Glob are not tools in native builds).
EDIT_TOOLS = {"Edit": "file_path", "Write": "file_path", "NotebookEdit": "notebook_path"}
SEPARATORS = {";", "&&", "||", "|", "&", "|&", ";;", "(", ")", "\n"}
REDIRECT_OUT = {">", ">>", ">|", "&>", "&>>", "<>"}
REDIRECT_OTHER = {"<", "<<", "<<<", "<&", "<<-"}
WRAPPERS = {"sudo", "env", "nohup", "time", "command", "exec", "nice", "builtin", "stdbuf"}
TOUCH_ANY = {"rm", "rmdir", "unlink", "shred", "truncate", "touch", "chmod", "chown", "chgrp", "mkdir",
             "mv", "tee", "vi", "vim", "nvim", "nano", "emacs", "ed", "ex", "setfacl", "chattr"}
RECURSIVE = {"rm", "rmdir", "chmod", "chown", "chgrp", "shred", "mv"}  # "." or a parent also hits
COPY_DEST = {"cp", "ln", "install", "rsync"}
INTERPRETERS = re.compile(r"^(python[0-9.]*|pypy[0-9.]*|perl|ruby|node|php)$")
SHELLS = {"bash", "sh", "zsh", "dash", "ksh"}
GIT_BLOCKED = {"commit", "rebase", "revert", "cherry-pick", "merge", "pull", "am", "apply", "filter-branch",
               "filter-repo", "update-ref", "replace", "switch"}
FROZEN_TEXT = re.compile(r"(?:^|[^\w.-])(?:harness|model|assets|\.claude)/|['\"](?:harness|model|assets|\.claude)['\"]"
                         r"|goals\.json|results\.tsv|leaderboard\.md")
WRITE_CODE = re.compile(
    r"open\([^)]*,\s*(?:mode\s*=\s*)?['\"][rbt]*[wax+]|\.write_(?:text|bytes)\(|\.write\("
    r"|\.(?:unlink|rmdir|rename|touch|chmod|symlink_to|hardlink_to|mkdir)\("
    r"|\bos\.(?:remove|unlink|rename|replace|rmdir|removedirs|truncate|chmod|symlink|link|makedirs|mkdir|system)\b"
    r"|\bshutil\.|\btorch\.save\b|\bjson\.dump\b|\.to_csv\(|\bnp\.save|\bunlink\b|\brename\b|open\s*\(?[^)]*['\"]\s*>")
HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][\w.-]*)\1")


class Blocked(Exception):
    pass


class Guard:
    def __init__(self, root: Path):
        self.root = root
        self.entries = [(name, Path(os.path.normpath(root / name)), Path(os.path.realpath(root / name)))
                        for name in FROZEN]

    # ---- paths -------------------------------------------------------------------------------
    def hit(self, arg: str, cwd: Path, ancestor: bool = False) -> str | None:
        """The frozen entry that path `arg` (relative to cwd) falls in; with ancestor=True also
        when the path contains a frozen entry (".", the root) or is a glob that can reach one."""
        if not arg or arg.startswith("-") and len(arg) > 1 or "=" in arg and not arg.startswith("/") and "/" not in arg.split("=")[0]:
            return None
        p = Path(os.path.expanduser(arg))
        p = p if p.is_absolute() else cwd / p
        lex, real = Path(os.path.normpath(p)), Path(os.path.realpath(p))
        globbed = any(c in arg for c in "*?[")
        for name, e_lex, e_real in self.entries:
            for cand, entry in ((lex, e_lex), (real, e_real)):
                if cand == entry or entry in cand.parents:
                    return name
                if ancestor and cand in entry.parents:
                    return name
            if globbed and (fnmatch.fnmatch(str(e_lex), str(lex)) or fnmatch.fnmatch(str(e_lex), str(lex) + "/*")):
                return name
        return None

    def refuse(self, what: str, name: str) -> None:
        raise Blocked(f"{what} would modify {name}{'/' if (self.root / name).is_dir() else ''}, which is frozen.")

    # ---- bash --------------------------------------------------------------------------------
    def bash(self, command: str, cwd: Path, depth: int = 0) -> None:
        if depth > 4:
            return
        bodies = []
        text = command
        for m in list(HEREDOC.finditer(command)):
            tail = command[m.end():]
            nl = tail.find("\n")
            if nl < 0:
                continue
            lines = tail[nl + 1:].split("\n")
            body = []
            for line in lines:
                if line.strip() == m.group(2):
                    break
                body.append(line)
            bodies.append("\n".join(body))
            text = text.replace("\n".join(body), "", 1)
        words = re.findall(r"[\w.+-]+", command)
        if bodies and any(INTERPRETERS.match(w) for w in words):
            for b in bodies:
                self.code(b, "a heredoc script")
        if bodies and any(w in SHELLS for w in words):
            for b in bodies:
                self.bash(b, cwd, depth + 1)
        try:
            lexer = shlex.shlex(text.replace("\n", " ; "), posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError:
            if FROZEN_TEXT.search(command) and re.search(r">|\b(rm|mv|cp|sed|tee|truncate|git|open|write)\b", command):
                raise Blocked("the command (which could not be parsed) mentions a frozen path and a write.")
            return
        segment: list[str] = []
        for tok in tokens + [";"]:
            if tok in SEPARATORS:
                if segment:
                    cwd = self.segment(segment, cwd, command, depth)
                segment = []
            else:
                segment.append(tok)

    def segment(self, toks: list[str], cwd: Path, whole: str, depth: int) -> Path:
        args: list[str] = []
        i = 0
        while i < len(toks):
            t = toks[i]
            if t in REDIRECT_OUT and i + 1 < len(toks):
                name = self.hit(toks[i + 1], cwd)
                if name:
                    self.refuse(f"the redirection `{t} {toks[i + 1]}`", name)
                i += 2
                continue
            if t in REDIRECT_OTHER or t in (">&", "<&"):
                i += 2
                continue
            if re.fullmatch(r"\d+", t) and i + 1 < len(toks) and toks[i + 1] in REDIRECT_OUT | {">&"}:
                i += 1
                continue
            args.append(t)
            i += 1
        while args and (re.fullmatch(r"[A-Za-z_]\w*=.*", args[0]) or args[0] in WRAPPERS):
            args = args[1:]
            if args and args[0] in ("timeout",):
                args = args[2:]
        if not args:
            return cwd
        cmd, rest = os.path.basename(args[0]), args[1:]
        paths = [a for a in rest if not a.startswith("-")]
        if cmd == "cd":
            target = paths[0] if paths else str(self.root)
            return Path(os.path.normpath(cwd / os.path.expanduser(target)))
        if cmd == "timeout":
            return self.segment(rest[1:], cwd, whole, depth)
        if cmd in TOUCH_ANY:
            for a in paths:
                name = self.hit(a, cwd, ancestor=cmd in RECURSIVE)
                if name:
                    self.refuse(f"`{cmd} {a}`", name)
        elif cmd in COPY_DEST:
            dests = [rest[j + 1] for j, a in enumerate(rest[:-1]) if a in ("-t", "--target-directory")]
            dests += [a.split("=", 1)[1] for a in rest if a.startswith("--target-directory=")]
            if paths:
                dests.append(paths[-1])
            for a in dests:
                name = self.hit(a, cwd)
                if name:
                    self.refuse(f"`{cmd} ... {a}`", name)
        elif cmd == "dd":
            for a in rest:
                if a.startswith("of=") and self.hit(a[3:], cwd):
                    self.refuse(f"`dd {a}`", self.hit(a[3:], cwd))
        elif cmd in ("sed", "gsed", "perl"):
            inplace = any(a == "--in-place" or a.startswith("--in-place=") or
                          (a.startswith("-") and not a.startswith("--") and "i" in a[1:]) for a in rest)
            if inplace:
                for a in paths:
                    name = self.hit(a, cwd)
                    if name:
                        self.refuse(f"`{cmd} -i ... {a}`", name)
            if cmd == "perl":
                self.interpreter(cmd, rest, cwd)
        elif cmd in ("awk", "gawk") and "inplace" in rest:
            for a in paths:
                name = self.hit(a, cwd)
                if name:
                    self.refuse(f"`{cmd} -i inplace ... {a}`", name)
        elif cmd == "find":
            if any(a in ("-delete", "-exec", "-execdir", "-ok", "-okdir", "-fprint") for a in rest):
                for a in paths:
                    name = self.hit(a, cwd, ancestor=True)
                    if name:
                        self.refuse(f"`find {a} ... -delete/-exec`", name)
        elif cmd == "xargs":
            inner = [a for a in rest if not a.startswith("-")]
            named = any(self.hit(w, cwd, ancestor=True) for w in re.findall(r"[^\s|;&<>()'\"]+", whole))
            if inner and os.path.basename(inner[0]) in TOUCH_ANY | COPY_DEST | {"sed", "perl"} and named:
                raise Blocked(f"`xargs {inner[0]}` fed from a command that names a frozen path could modify it.")
        elif cmd in ("patch",):
            raise Blocked("`patch` can modify any file, frozen ones included; change optimize.py with the Edit tool.")
        elif cmd == "git":
            self.git(rest, cwd)
        elif cmd in SHELLS:
            if "-c" in rest and rest.index("-c") + 1 < len(rest):
                self.bash(rest[rest.index("-c") + 1], cwd, depth + 1)
        elif cmd == "eval":
            self.bash(" ".join(rest), cwd, depth + 1)
        elif INTERPRETERS.match(cmd):
            self.interpreter(cmd, rest, cwd)
        return cwd

    def interpreter(self, cmd: str, rest: list[str], cwd: Path) -> None:
        for flag in ("-c", "-e", "-E"):
            if flag in rest and rest.index(flag) + 1 < len(rest):
                self.code(rest[rest.index(flag) + 1], f"the {cmd} {flag} code")
        script = next((a for a in rest if not a.startswith("-")), None)
        if script and "--rebaseline" in rest and os.path.basename(script) == "run_experiment.py":
            raise Blocked("`run_experiment.py --rebaseline` accepts changed frozen files; only a person may run it.")

    def code(self, code: str, what: str) -> None:
        if FROZEN_TEXT.search(code) and WRITE_CODE.search(code):
            m = FROZEN_TEXT.search(code)
            raise Blocked(f"{what} names a frozen path ({m.group(0).strip(chr(34) + chr(39) + ' ')}) and writes files.")

    def git(self, rest: list[str], cwd: Path) -> None:
        i = 0
        while i < len(rest) and rest[i].startswith("-"):
            if rest[i] == "-C" and i + 1 < len(rest):
                cwd = Path(os.path.normpath(cwd / rest[i + 1]))
                i += 2
            elif rest[i] in ("-c", "--git-dir", "--work-tree"):
                i += 2
            else:
                i += 1
        if i >= len(rest):
            return
        sub, args = rest[i], rest[i + 1:]
        if sub in GIT_BLOCKED:
            raise Blocked(f"`git {sub}` changes the tree or its history; run_experiment.py alone commits "
                          "(keepers) and restores optimize.py. Ask the person if you need this.")
        if sub == "stash" and (not args or args[0] not in ("list", "show")):
            raise Blocked("`git stash` would sweep away uncommitted results.tsv/PROGRESS.md rows with your change.")
        if sub == "clean" and not any(a in ("-n", "--dry-run") for a in args):
            raise Blocked("`git clean` deletes untracked files (assets/, records); not allowed.")
        if sub in ("checkout", "restore", "reset", "rm", "mv"):
            if sub == "restore" and "--staged" in args and not any(a in ("-W", "--worktree") for a in args):
                return
            if sub == "reset" and any(a in ("--hard", "--merge", "--keep") for a in args):
                raise Blocked(f"`git reset {' '.join(args)}` rewrites the working tree, frozen files and records included.")
            if "--" in args:
                pathspecs = args[args.index("--") + 1:]
                revs = [a for a in args[:args.index("--")] if not a.startswith("-")]
            else:
                nonopt = [a for a in args if not a.startswith("-")]
                pathspecs = [a for a in nonopt if a in (".", "*") or any(c in a for c in "*?[")
                             or os.path.lexists(cwd / a) or self.hit(a, cwd)]
                revs = [a for a in nonopt if a not in pathspecs]
            for a in pathspecs:
                name = self.hit(a, cwd, ancestor=True)
                if name:
                    self.refuse(f"`git {sub} {a}`", name)
            if sub in ("checkout", "reset") and revs and not pathspecs and not (sub == "checkout" and "-b" in args):
                raise Blocked(f"`git {sub} {' '.join(args)}` moves HEAD or switches branches, which changes frozen "
                              "files and the record of keepers; ask the person.")


def main() -> int:
    payload = read_payload()
    if unfrozen():
        return 0
    root = project_root(payload)
    cwd = Path(os.path.abspath(payload.get("cwd") or root))
    tool = payload.get("tool_name", "")
    tin = payload.get("tool_input") or {}
    guard = Guard(root)
    try:
        if tool in EDIT_TOOLS:
            target = str(tin.get(EDIT_TOOLS[tool]) or "")
            name = guard.hit(target, cwd)
            if name:
                guard.refuse(f"{tool} on {target}", name)
            if "--only-candidate" in sys.argv[1:] or payload.get("agent_type") == OPTIMIZER_AGENT:
                cand = candidate_name(root)
                p = Path(target) if os.path.isabs(target) else cwd / target
                if os.path.realpath(p) != os.path.realpath(root / cand):
                    raise Blocked(f"the {OPTIMIZER_AGENT} subagent may edit only {cand}, not {target}.")
        elif tool == "Bash":
            guard.bash(str(tin.get("command") or ""), cwd)
    except Blocked as e:
        print(f"guard_frozen: blocked. {e} The frozen files (harness/, model/, goals.json, assets/, "
              "results.tsv, leaderboard.md, .claude/) are read-only for the agent (AGENTS.md): edit only "
              "optimize.py and measure it with `python harness/run_experiment.py --desc \"...\"`. "
              "If a frozen file looks wrong, stop and tell the person instead of working around it.",
              file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
