"""hetsplit doctor: check this machine for what hetsplit needs, and remove what killed runs left behind."""

from __future__ import annotations

import json
import sys

from hetsplit.cli.common import add_command


def register(sub) -> None:
    p = add_command(sub, "doctor", "check this machine for what hetsplit needs; remove stale network namespaces, CPU cgroups and worker folders",
                    ["hetsplit doctor", "hetsplit doctor --dry-run", "hetsplit doctor --json"],
                    description="Report python and package versions, whether link emulation (--emulate-links), device "
                                "emulation (--emulate-devices) and the energy meters can be used here (and why "
                                "not), and remove the network namespaces and CPU cgroups left by emulated runs that "
                                "were killed (--dry-run only lists them). "
                                "Exit 0 when healthy, 1 when something checked is broken (a required package does "
                                "not import, a stale namespace or cgroup cannot be removed), 2 on bad input. Link or device "
                                "emulation and energy meters being unavailable is reported, not an error.")
    p.add_argument("--dry-run", action="store_true", help="list stale namespaces, cgroups and worker folders instead of removing them")
    p.add_argument("--json", action="store_true", help="print the items as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from hetsplit.doctor import BROKEN, check

    items = check(args.dry_run)
    broken = [i for i in items if i["status"] == BROKEN]
    if args.json:
        json.dump({"healthy": not broken, "items": items}, sys.stdout, indent=1)
        print()
    else:
        width = max(len(i["item"]) for i in items)
        for i in items:
            print(f"{i['item']:<{width}}  {i['status']:<11}  {i['detail']}")
        print("healthy" if not broken else "broken: " + ", ".join(i["item"] for i in broken))
    return 1 if broken else 0
