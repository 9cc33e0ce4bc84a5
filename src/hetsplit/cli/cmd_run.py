"""hetsplit run PLAN MODEL: run any plan (pipeline, mapping, tensor-parallel) for real, one process per device,
measured and verified."""

from __future__ import annotations

from pathlib import Path

from hetsplit.cli.common import add_command, add_input_shape_option, input_shapes, int_range, progress


def register(sub) -> None:
    p = add_command(sub, "run", "run a plan across processes (or hosts), measure it and verify every output",
                    ["hetsplit run out/plans.json resnet18 --inputs 16",
                     "hetsplit run imce/plans.json resnet8 -n 200 --here   # IMC mapping, costed for its processes",
                     "hetsplit run plan.json resnet50 --cluster local --profile prof.json --compare --out cmp.json",
                     "hetsplit run plan.json resnet18 --cluster edge.yaml --emulate-links",
                     "hetsplit run plan.json resnet18 --emulate-devices --compare  # each worker at its device's speed",
                     "hetsplit run plan.json resnet18 --hosts gpu0=10.0.0.2  # gpu0 joins from 10.0.0.2: "
                     "`hetsplit worker` there"])
    p.add_argument("plan", help="plan or plan-set JSON; a set gives its best Pareto plan (or --index)")
    p.add_argument("model", help="zoo name or .onnx file the plan was made for")
    p.add_argument("--index", type=int, default=None, help="which plan of a plan set")
    p.add_argument("--inputs", "-n", type=int, default=16, help="inputs streamed through the devices (default 16)")
    p.add_argument("--latency-inputs", type=int, default=None,
                   help="first inputs sent one at a time, at most --inputs (default 2, or --inputs if fewer)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="fail when no tensor moves, or the processes do not meet, for S seconds (default 60)")
    p.add_argument("--threads", type=int_range(1), default=1, help="compute threads per device (default 1)")
    p.add_argument("--cluster", "-c", default=None, help="cluster of the plan (default: the plan's own)")
    p.add_argument("--profile", default=None, help="hetsplit.profile/1 JSON for the predictions of --compare")
    p.add_argument("--recalibrate", action="store_true",
                   help="measure this machine's local devices anew for the cluster's costs, and with --here the "
                        "runtime's own per-message costs (both cached per machine)")
    p.add_argument("--compare", action="store_true", help="print predicted beside measured metrics")
    p.add_argument("--here", action="store_true",
                   help="compare (implies --compare) with a prediction for the processes that ran the plan here "
                        "(every device a 1-thread local-cpu worker, costs from --profile or profiled now, the runtime's "
                        "per-message costs measured here on first use; the simulator and the bounds of this "
                        "machine's shared cores), not the plan's cluster")
    p.add_argument("--emulate-links", action="store_true",
                   help="shape every link to the cluster's bandwidth and latency (needs root, ip and tc)")
    p.add_argument("--emulate-devices", action="store_true",
                   help="throttle each device's worker (cgroup CPU quota) to the device's speed relative to this "
                        "machine, all slowed by one time dilation D, and report emulated metrics (measured / D); "
                        "needs root and the cgroup cpu controller")
    p.add_argument("--pin", action="store_true", help="pin each device's worker to its own CPU cores")
    p.add_argument("--cpu-only", action="store_true",
                   help="compute on the CPU for every device (default: a gpu device runs on its host's GPU where the "
                        "host has CUDA)")
    p.add_argument("--hosts", default=None, metavar="DEV=HOST,...",
                   help="run these devices on other hosts: the run prints the `hetsplit worker` command for each "
                        "host (the others and the driver run here)")
    p.add_argument("--port", type=int_range(0, 65535), default=0, help="rendezvous port (default 0: a free one)")
    p.add_argument("--ssh", action="store_true", help="with --hosts: run each host's worker command over ssh")
    p.add_argument("--split-dir", default=None, metavar="DIR", help="keep the sub-models here (default: temporary)")
    add_input_shape_option(p)
    p.add_argument("--run-dir", default=None, metavar="DIR", help="keep the processes' logs and measurements here")
    p.add_argument("--out", "-o", default=None, metavar="FILE", help="write the measurements (and comparison) as JSON")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from hetsplit.cli.run_print import hooks, print_outcome
    from hetsplit.outpath import output_file
    from hetsplit.workflow.run import CompareOptions, RunJob, RunRequest, run_job

    request = RunRequest(inputs=args.inputs, latency_inputs=args.latency_inputs, timeout_s=args.timeout,
                         threads=args.threads, port=args.port, pin=args.pin, cpu_only=args.cpu_only,
                         emulate_links=args.emulate_links, emulate_devices=args.emulate_devices, hosts=args.hosts,
                         ssh=args.ssh, split_dir=Path(args.split_dir) if args.split_dir else None,
                         run_dir=Path(args.run_dir) if args.run_dir else None, profile=args.profile)
    fidelity = "here" if args.here else ("closed" if args.profile else "plan") if args.compare else None
    compare = CompareOptions(fidelity, args.profile, args.recalibrate) if fidelity else None
    job = RunJob(args.plan, args.model, request, compare, args.index, args.cluster, input_shapes(args) or None,
                 args.recalibrate)
    output_file(args.out)
    outcome = run_job(job, hooks(progress))
    print_outcome(outcome, args.json, args.out)
    return 0
