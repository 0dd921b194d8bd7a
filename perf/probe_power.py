"""Clock and power while a GEMM runs, ours beside cuBLAS: is the H200 power-capped here, and does
one kernel run at a lower SM clock than the other for the same work?

    python perf/probe_power.py [MxNxK ... | attention]   # default: the issue's four bf16 shapes

For each shape, the kernels are first timed alone in turn (bench_gemm.time_in_turn: the GPU
idles in a sleep kernel before each call, as the benchmark times them). Then each launch runs
back to back for SECONDS (a soak) while ``nvidia-smi -lms`` samples the SM clock, board power
and the active clock-event reasons; the first 0.3 s (ramp-up) is dropped. Printed a line a
soak: GPU time a launch over the soak, median SM clock, median power, energy a GEMM (power x
time), and the reasons seen (0x4: the software power cap). The soaks go in turn, ROUNDS times,
so a drift in temperature shows as spread rather than as one kernel's cost.
Each launch is checked against torch first (bench_gemm.checked)."""
import os
import statistics
import subprocess
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bench_gemm as bg  # noqa: E402

SECONDS = float(os.environ.get("POWER_SECONDS", "2.0"))
ROUNDS = int(os.environ.get("POWER_ROUNDS", "2"))
CLUSTER_WS = ("cluster", (128, 256, 64, 4, 8, 1, 64))
PAIRS_B = ("cluster", (128, 256, 64, 4, 8, 2, 64))
# the benchmark's fastest configurations of ours at each shape (perf/README.md, session 15) and
# their neighbours that move fewer bytes through L2 (pairs multicasting B)
CASES = {
    (4096, 4096, 4096): {"cluster-ws x1": CLUSTER_WS, "cluster-ws x2": PAIRS_B,
                         "cluster-ws 256x128 x2 share A": ("cluster", (256, 128, 64, 4, 8, 2, 32, True)),
                         "persistent 128x256x64/4": ("hopper", (128, 256, 64, 4, 8, 64))},
    (4000, 4000, 4000): {"cluster-ws x1": CLUSTER_WS, "cluster-ws x2": PAIRS_B},
    (8192, 8192, 8192): {"cluster-ws x1": CLUSTER_WS, "cluster-ws x2": PAIRS_B},
    (128, 8192, 8192): {"ws 64x128 co-located": ("ws", (64, 128, 64, 8, 4, 128, 2)),
                        "ws 64x128": ("ws", (64, 128, 64, 8, 4, 128, 1)),
                        "cluster-ws 64x128 x2 share B": ("cluster", (64, 128, 64, 8, 4, 2, 64)),
                        # fewer bytes out of L2: one tile row (A read by 64 CTAs, B once), no cluster
                        "ws 128x128x64/6/8": ("ws", (128, 128, 64, 6, 8)),
                        "ws 64x256x64/4/4": ("ws", (64, 256, 64, 4, 4)),
                        # cuBLAS's own: 128x64 tiles in pairs multicasting A
                        "cluster-ws 128x64 x2 share A": ("cluster", (128, 64, 64, 8, 4, 2, 64, True))},
}
QUERY = "clocks.sm,power.draw,clocks_event_reasons.active,clocks.mem"


class Sampler:
    """nvidia-smi sampling every 10 ms in the background, rows kept with their arrival time."""

    def __init__(self):
        self.proc = subprocess.Popen(["nvidia-smi", "-i", str(torch.cuda.current_device()),
                                      f"--query-gpu={QUERY}", "--format=csv,noheader,nounits", "-lms", "10"],
                                     stdout=subprocess.PIPE, text=True)
        self.rows = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            parts = [p.strip() for p in line.split(",")]
            try:
                self.rows.append((time.perf_counter(), float(parts[0]), float(parts[1]), parts[2], float(parts[3])))
            except (ValueError, IndexError):
                pass

    def between(self, t0, t1):
        return [r for r in self.rows if t0 <= r[0] <= t1]

    def close(self):
        self.proc.terminate()


def soak(run, sampler):
    """(GPU ms a launch over SECONDS back to back, median SM MHz, median W, reasons seen and the
    memory clock), by bench_gemm.sustained_time, the ramp-up's samples dropped."""
    per, t0, t1 = bg.sustained_time(run, SECONDS)
    rows = sampler.between(t0 + 0.3, t1)
    if not rows:
        return per, float("nan"), float("nan"), "-"
    reasons = sorted({r[3] for r in rows})
    mem = statistics.median(r[4] for r in rows)
    return (per, statistics.median(r[1] for r in rows), statistics.median(r[2] for r in rows),
            " ".join(reasons) + f", memory {mem:.0f} MHz")


def probe(shape, sampler):
    m, n, k = shape
    a, b, ref, runs = bg.probe_case(shape)
    for name, (kind, cfg) in CASES[shape].items():
        if kind == "cluster":
            make = lambda c, cfg=cfg: bg.cluster_run(cfg, a, b, c, shape, bg.matmul_hopper_cluster_ws)  # noqa: E731
        else:
            kernel = bg.matmul_hopper_ws if kind == "ws" else bg.matmul_hopper
            make = lambda c, cfg=cfg, kernel=kernel: bg.hopper_run(cfg, a, b, c, shape, kernel=kernel)  # noqa: E731
        try:
            run = bg.checked(name, make, shape, ref)
        except Exception as e:  # noqa: BLE001  (a configuration that does not build is reported)
            print(f"  {name}: {type(e).__name__}: {str(e)[:200]}", flush=True)
            continue
        if run is not None:
            runs[name] = run
    if m <= 256:  # memory-bound: DRAM's own pace alone and sustained, beside (TFLOP/s meaningless)
        runs["read B alone (torch sum)"] = lambda: b.sum()
    bg.time_in_turn(runs, shape, rounds=5, reps=20)  # each launch alone, the GPU cool between
    soaks(runs, sampler, f"{m}x{n}x{k}", 2.0 * m * n * k, "cublas")


def soaks(runs, sampler, what, flop, anchor):
    """Every run soaked in turn, ROUNDS times; a line each, and the median ratio to ``anchor``."""
    times = {label: [] for label in runs}
    for r in range(ROUNDS):
        for label, fn in runs.items():
            ms, mhz, watts, reasons = soak(fn, sampler)
            times[label].append(ms)
            print(f"{what} soak {r} {label:30s} {ms * 1e3:7.1f} us {flop / ms / 1e9:5.0f} TFLOP/s  "
                  f"SM {mhz:5.0f} MHz  {watts:5.0f} W  {watts * ms:6.1f} mJ a call  reasons {reasons}", flush=True)
    base = statistics.median(times[anchor])
    print(f"{what} sustained, x {anchor} (median of {ROUNDS} soaks): " +
          ", ".join(f"{label} {base / statistics.median(ts):.3f}" for label, ts in times.items() if label != anchor),
          flush=True)


ATTENTION = {  # (B, H, S, D, causal): our configurations (perf/bench_attention.py's best, session 15)
    (4, 32, 4096, 128, False): [("wsp", 64, 128, 4, 2), ("ws", 64, 128, 4, 2)],
    (4, 32, 4096, 128, True): [("ws", 64, 128, 4, 2), ("wsp", 64, 128, 4, 2)],
    (4, 32, 4096, 64, False): [("ws3p", 64, 128, 4, 2), ("ws", 64, 128, 4, 2)],
}


def probe_attention(sampler):
    """The attention rows the same way: cuDNN's SDPA beside our configurations, each checked
    against torch's math backend on two heads first (as perf/bench_attention.py does)."""
    import bench_attention as ba
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for (b, h, s, d, causal), configs in ATTENTION.items():
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        with sdpa_kernel(SDPBackend.MATH):
            ref = torch.nn.functional.scaled_dot_product_attention(q[:1, :2].float(), k[:1, :2].float(),
                                                                   v[:1, :2].float(), is_causal=causal)
        runs = {"cudnn": ba.sdpa(SDPBackend.CUDNN_ATTENTION, q, k, v, causal)}
        for cfg in configs:
            o = torch.full_like(q, float("nan"))
            fn = ba.ours(cfg, q, k, v, o, causal)
            fn()
            torch.cuda.synchronize()
            err = (o[:1, :2].float() - ref).abs().max().item()
            if err < 3e-2:
                runs[str(cfg)] = fn
            else:
                print(f"  ours {cfg}: wrong result (max err {err})", flush=True)
        what = f"B{b} H{h} S{s} D{d}{' causal' if causal else ''}"
        flop = 4.0 * b * h * s * s * d / (2 if causal else 1)
        times = {label: [] for label in runs}
        for _ in range(5):  # alone, in turn (bench_attention's head to head)
            for label, fn in runs.items():
                times[label].append(bg.gpu_time(fn, reps=10))
        alone = {label: statistics.median(ts) for label, ts in times.items()}
        print(f"{what} alone, x cudnn (median of 5 rounds): " + ", ".join(
            f"{label} {flop / alone[label] / 1e9:.0f} TFLOP/s {alone['cudnn'] / alone[label]:.3f}" for label in runs),
            flush=True)
        soaks(runs, sampler, what, flop, "cudnn")


def main():
    args = sys.argv[1:] or [f"{m}x{n}x{k}" for m, n, k in CASES]
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,power.limit,clocks.max.sm", "--format=csv"],
                         capture_output=True, text=True).stdout, flush=True)
    sampler = Sampler()
    try:
        for arg in args:
            if arg == "attention":
                probe_attention(sampler)
            else:
                probe(tuple(int(x) for x in arg.split("x")), sampler)
    finally:
        sampler.close()


if __name__ == "__main__":
    main()
