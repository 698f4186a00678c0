"""``python -m lab ...``: drive the local Slurm lab from a shell (see :func:`main`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from lab.conf import NODE_CPUS, NODE_MEMORY_MB
from lab.control import Lab, LabStatus
from lab.demo import fresh_demo, submit_demo, wait_demo_steady
from lab.errors import LabError
from lab.flavors import DEFAULT_FLAVOR, FLAVORS
from lab.record import record, record_window


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m lab", description="A real Slurm on loopback for tests.")
    sub = parser.add_subparsers(dest="cmd", required=True)

    def flavored(name: str, help_: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_)
        p.add_argument(
            "--slurm",
            choices=list(FLAVORS),
            default=DEFAULT_FLAVOR,
            help=f"which lab (default {DEFAULT_FLAVOR})",
        )
        return p

    up = flavored("up", "start a lab (builds and caches its chroot the first time)")
    up.add_argument("--nodes", type=int, default=None, help="cpu partition nodes c1..cN (default 3)")
    up.add_argument("--port-base", type=int, default=None, help="first of the 100 ports the lab uses")
    up.add_argument("--demo", action="store_true", help="also submit the demo workload and wait for it")
    up.add_argument("--json", action="store_true")

    down = flavored("down", "stop a lab's own processes and unmount its chroot")
    down.add_argument("--all", action="store_true", help="every lab")

    status = sub.add_parser("status", help="show every lab (or one with --slurm)")
    status.add_argument("--slurm", choices=list(FLAVORS), default=None)
    status.add_argument("--json", action="store_true")

    token = flavored("token", "print a fresh JWT for root")
    token.add_argument("--lifespan", type=int, default=3600, help="seconds")

    node = flavored("node", "add or remove a node at run time")
    node_sub = node.add_subparsers(dest="node_cmd", required=True)
    add = node_sub.add_parser("add", help="start a slurmd (configured node, or a new --dynamic one)")
    add.add_argument("name")
    add.add_argument("--cpus", type=int, default=NODE_CPUS)
    add.add_argument("--memory-mb", type=int, default=NODE_MEMORY_MB)
    add.add_argument("--gpus", type=int, default=0)
    add.add_argument(
        "--dynamic", action="store_true", help="join with slurmd -Z (nodeset ns-dyn, partition dyn)"
    )
    remove = node_sub.add_parser("remove", help="stop a node's slurmd (dynamic nodes are deleted)")
    remove.add_argument("name")

    demo = flavored("submit-demo", "submit the demo workload and wait until it settles")
    demo.add_argument("--no-wait", action="store_true")
    demo.add_argument("--timeout", type=float, default=90.0)

    exe = flavored("exec", "run a Slurm client command against the lab: exec -- squeue -l")
    exe.add_argument("argv", nargs=argparse.REMAINDER)

    rec = flavored("record", "save raw REST payloads and CLI views under DIR/slurm-<release>/")
    rec.add_argument("dir", type=Path)
    rec.add_argument("--all", action="store_true", help="every running lab")
    rec.add_argument(
        "--window",
        action="store_true",
        help="jobs inside slurmctld's first-pass window, to DIR/window-<release>/ (restarts the lab)",
    )
    return parser


def _print_status(st: LabStatus) -> None:
    if not st.running:
        print(f"lab {st.flavor}: down (state {st.state_dir})")
        return
    print(f"lab {st.flavor}: up — Slurm {st.slurm_release}, API {' '.join(st.api_versions)}")
    print(f"  url        {st.url}")
    print(f"  unix       {st.unix_url}")
    print(f"  token file {st.token_file}")
    print(f"  slurm.conf {st.slurm_conf}")
    print(f"  state dir  {st.state_dir}")
    print(f"  nodes      {' '.join(st.nodes)}")


def run(args: argparse.Namespace) -> int:
    if args.cmd == "status":
        names = [args.slurm] if args.slurm else list(FLAVORS)
        statuses = [Lab(name).status() for name in names]
        if args.json:
            print(json.dumps([s.to_json() for s in statuses], indent=1))
        else:
            for st in statuses:
                _print_status(st)
        return 0
    if args.cmd == "down" and args.all:
        for name in FLAVORS:
            stopped = Lab(name).down()
            print(f"lab {name}: stopped {len(stopped)} process(es)")
        return 0
    if args.cmd == "record" and args.all:
        labs = [Lab(name) for name in FLAVORS if Lab(name).is_running()]
        if not labs:
            raise LabError("no lab is running")
        for lab in labs:
            print(record_window(lab, args.dir) if args.window else record(lab, args.dir))
        return 0

    lab = Lab(args.slurm, nodes=getattr(args, "nodes", None), port_base=getattr(args, "port_base", None))
    if args.cmd == "up":
        if args.demo and lab.is_running():
            problems = lab.health_problems()
            if problems:
                print(f"lab {lab.flavor.name}: {'; '.join(problems)}: restarting it", flush=True)
                lab.restart()
        st = lab.up()
        if args.demo:
            wait_demo_steady(lab, fresh_demo(lab))
        print(json.dumps(st.to_json(), indent=1)) if args.json else _print_status(st)
    elif args.cmd == "down":
        stopped = lab.down()
        print(f"lab {lab.flavor.name}: stopped {len(stopped)} process(es)")
    elif args.cmd == "token":
        print(lab.token(args.lifespan))
    elif args.cmd == "node":
        if args.node_cmd == "add":
            node = lab.add_node(
                args.name, cpus=args.cpus, memory_mb=args.memory_mb, gpus=args.gpus, dynamic=args.dynamic
            )
            print(f"node {node.name} up (port {node.port}{', dynamic' if node.dynamic else ''})")
        else:
            lab.remove_node(args.name)
            print(f"node {args.name} removed")
    elif args.cmd == "submit-demo":
        lab.up()
        jobs = submit_demo(lab)
        if not args.no_wait:
            wait_demo_steady(lab, jobs, timeout=args.timeout)
        print(json.dumps(jobs))
    elif args.cmd == "exec":
        argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
        if not argv:
            raise LabError("exec needs a command, e.g. `lab exec -- squeue`")
        result = lab.run_raw(argv)
        sys.stdout.write(result.stdout)
        sys.stderr.write(result.stderr)
        return result.returncode
    elif args.cmd == "record":
        print(record_window(lab, args.dir) if args.window else record(lab, args.dir))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (errors print one line to stderr and return 1)."""
    args = _parser().parse_args(list(argv) if argv is not None else None)
    try:
        return run(args)
    except LabError as err:
        print(f"lab: error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
