"""agent/policy.py, the one source of what the agent may do: .claude/settings.json is made from
it (and committed as made), a scaffolded target is covered with no hand edit, and configuration
names are recognised in any folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from conftest import tool

REPO = Path(__file__).resolve().parent.parent
VAE = REPO / "targets" / "wan-vae"  # the worked example's target folder
from harness.paths import agent_policy  # noqa: E402

policy = agent_policy()


def test_the_committed_settings_are_the_generated_ones():
    """`auto-optim settings` writes them; an edit by hand (or a new target without it) fails here."""
    assert (REPO / ".claude" / "settings.json").read_text() == policy.settings_text(REPO), \
        "run `auto-optim settings` (or python harness/cli/person.py settings) and commit .claude/settings.json"


def test_every_target_folder_is_protected_literally():
    """The bash sandbox honours only literal paths (glob rules bind nothing on Linux): each target's
    configuration names are listed one by one; the globs are for the file tools."""
    s = policy.settings(REPO)
    deny = s["permissions"]["deny"]
    for folder in ("", "targets/llm-decode/"):
        for name in policy.CONFIG_NAMES:
            assert f"Edit(/{folder}{name})" in deny, folder + name
        for name in policy.CONFIG_FOLDERS:
            assert f"Edit(/{folder}{name}/**)" in deny, folder + name
    assert {"Edit(**/CLAUDE.md)", "Edit(**/.gitattributes)", "Edit(**/.claude/**)"} <= set(deny)
    assert {"Edit(/targets/llm-decode/goals.json)", "Edit(/targets/llm-decode/records/**)",
            "Edit(/targets/wan-vae/model/**)", "Edit(/targets/wan-vae/plans/**)", "Edit(/targets/wan-vae/integrations/**)"} <= set(deny)
    assert "Edit(/targets/wan-vae/request.json)" in s["permissions"]["allow"] and len(deny) == len(set(deny))
    # no literal rule under a folder that may not exist (Claude Code would make it a read-only folder)
    assert not [r for r in deny if "/candidates/" in r]


def test_stray_configuration_is_found_outside_the_protected_paths(tmp_path: Path):
    root = tmp_path / "project"
    for path in ("newdir/CLAUDE.md", "candidates/AGENTS.md", "deep/a/.gitattributes", "x/.claude/rules/r.md",
                 "targets/t/goals.json", "targets/t/sub/claude.local.md", "harness/CLAUDE.md", "AGENTS.md",
                 ".pytest_cache/.gitignore", "tracked/CLAUDE.md", "y/.git/config", "z/.claude/.cc-writes/f"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x")
    (root / "cwd" / ".claude" / ".cc-writes").mkdir(parents=True)  # Claude Code's own, in a folder a call ran in
    found = policy.stray_configuration(root, {"tracked/CLAUDE.md"})
    assert found == ["candidates/AGENTS.md", "deep/a/.gitattributes", "newdir/CLAUDE.md", "targets/t/sub/claude.local.md",
                     "x/.claude", "y/.git", "z/.claude"], found  # harness/ and the root's AGENTS.md are protected


def test_configuration_names():
    for path in ("CLAUDE.md", "a/b/AGENTS.md", "x/.gitattributes", ".claude/settings.json", "a/.git/config",
                 "a/.claude", "Claude.md", "/p/.MCP.json", "c\\.gitignore"):
        assert policy.config_name(path), path
    for path in ("optimize.py", "candidates/a.py", "PROGRESS.md", "request.json", "claude/x.py", "a.gitignore.py"):
        assert policy.config_name(path) is None, path


def test_a_scaffolded_target_is_protected_with_no_hand_edit(tmp_path: Path):
    """harness/cli/new_target.py writes .claude/settings.json again: the third target's goals, records,
    adapter and configuration are denied to the agent, and the guard refuses its configuration names."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copytree(REPO / "harness", project / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "agent", project / "agent", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / ".claude", project / ".claude")
    shutil.copy(REPO / "pyproject.toml", project / "pyproject.toml")
    (project / "targets" / "wan-vae").mkdir(parents=True)
    shutil.copy(VAE / "goals.json", project / "targets" / "wan-vae" / "goals.json")
    before = (project / ".claude" / "settings.json").read_text()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLAUDE", "AUTO_OPTIM_GOALS"))}
    p = subprocess.run([*tool("harness.cli.new_target", project), "third"], cwd=project, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    after = (project / ".claude" / "settings.json").read_text()
    assert after != before and after == policy.settings_text(project)
    deny = json.loads(after)["permissions"]["deny"]
    for rule in ("Edit(/targets/third/goals.json)", "Edit(/targets/third/records/**)", "Edit(/targets/third/results.tsv)",
                 "Edit(/targets/third/third_model/**)", "Edit(/targets/third/.gitignore)",
                 "Edit(/targets/third/CLAUDE.md)", "Edit(/targets/third/.gitattributes)",
                 "Read(/targets/third/assets/**)"):
        assert rule in deny, rule
    hook = subprocess.run([sys.executable, str(project / "agent" / "hooks" / "guard_frozen.py")],
                          input=json.dumps({"tool_name": "Write", "cwd": str(project), "tool_input": {
                              "file_path": str(project / "targets" / "third" / "candidates" / "CLAUDE.md")}}),
                          env={**env, "CLAUDE_PROJECT_DIR": str(project)}, capture_output=True, text=True, timeout=30)
    assert hook.returncode == 2 and "configuration" in hook.stderr, hook.stderr
