"""`auto-optim records ACTION`: the person's commands on the ledger (write the views again, show the rows, restore, print a recorded source, check the signatures).

Usage:
    auto-optim records leaderboard      # write results.tsv and leaderboard.md again from records/
    auto-optim records show [EXP]       # print the rows (or one experiment's)
    auto-optim records restore          # put back the records git's last commit or a row holds, then results.tsv
    auto-optim records source EXP       # print the candidate source an experiment measured
                                        # (... > optimize.py brings back a reverted edit)
    auto-optim records verify           # which records this machine's key signed, which git's last commit holds
"""

from __future__ import annotations

import argparse
import sys

from harness import console, paths, _common
from harness.ledger import leaderboard, results
from harness.ledger.store import Store, records_lock
from harness.errors import Refused


def _span(exps: list[str]) -> str:
    return ", ".join(exps) if len(exps) <= 5 else f"{exps[0]}..{exps[-1]}"


def source(exp: str | None) -> str:
    """The candidate source an experiment measured (records/sources/, by its record's hash)."""
    if not exp:
        raise Refused("name the experiment whose source to print (e005)")
    text = Store.here().source(exp)
    if text is None:
        raise Refused(f"records/{exp}.json holds no candidate source (a baseline's is harness/baselines/, "
                                 "or a record written from its row)")
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="auto-optim records", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    paths.add_target_option(p)
    p.add_argument("action", choices=["leaderboard", "show", "restore", "source", "verify"])
    p.add_argument("exp", nargs="?", help="with source or show: the experiment (e005)")
    a = p.parse_args(argv)
    if a.exp and a.action not in ("source", "show"):
        p.error(f"records {a.action} takes no experiment (only source and show do)")
    store = Store.here()
    try:
        if a.action == "source":
            sys.stdout.write(source(a.exp))
            return 0
        if a.action == "restore":
            with records_lock():
                restored, lost = results.restore(store)
            console.emit(["records/: " + (f"put back {console.plural(len(restored), 'record')} from git's last commit "
                                          f"({_span(restored)})" if restored else "nothing to put back from git")
                          + (f"; {console.plural(len(lost), 'record')} no commit held ({_span(lost)}) written as lost, "
                             "from their rows" if lost else ""), f"{results.results_path().name} written from records/"],
                         {"records_restored": ",".join(restored), "records_lost": ",".join(lost),
                          "rows": len(results.read())})
            return 0
        if a.action == "verify":
            committed = store.committed() or {}
            signed = [e for e in store.exps() if store.signed(e)]
            kept = [e for e in store.exps() if store.unchanged_since_commit(e, committed)]
            stray = [e for e in store.exps() if e not in signed and e not in kept]
            console.emit([f"{console.plural(len(store.exps()), 'record')}: {len(signed)} signed with this machine's key, "
                          f"{len(kept)} as git's last commit holds them"
                          + (f"; NEITHER: {_span(stray)}" if stray else "")],
                         {"records": len(store.exps()), "signed": len(signed), "committed": len(kept),
                          "neither": ",".join(stray)})
            return 1 if stray else 0
        if a.action == "leaderboard":
            with records_lock():
                rows = results.write(store)
                here = (rows[-1]["preset"], rows[-1]["gpu"]) if rows else None  # the last run's machine first
                leaderboard.write_leaderboard(rows, goals=_common.load_goals(), here=here)
            console.emit([f"results.tsv and leaderboard.md written from {len(rows)} records"],
                         {"rows": len(rows), "out": str(leaderboard.leaderboard_path())})
            return 0
        rows = results.rows(store)
        if a.exp:
            rows = [r for r in rows if r["exp"] == a.exp]
            if not rows:
                raise Refused(f"no record {a.exp} in records/")
    except Refused as e:
        print(f"records: {e}", file=sys.stderr)
        return 2
    console.emit([r["exp"] + "  " + r["status"] + "  " + r["median_s"] + "  " + r["desc"] for r in rows], {"rows": len(rows)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
