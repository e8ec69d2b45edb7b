"""The ``aotkernels`` command: matrix, inspect, doctor, bench.

Tables through rich; ``--json`` prints the machine-readable shapes scripts rely on.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["main"]


def _console() -> Any:
    from rich.console import Console

    return Console()


def _table(title: str, *columns: str) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for c in columns:
        t.add_column(c)
    return t


def _cmd_matrix(args: argparse.Namespace) -> int:
    from . import matrix

    data = matrix()
    if args.family:
        if args.family not in data["families"]:
            print(
                f"aotkernels matrix: unknown family {args.family!r} (families: "
                f"{', '.join(data['families'])})",
                file=sys.stderr,
            )
            return 2
        data["families"] = {args.family: data["families"][args.family]}
    if args.json:
        print(json.dumps(data, indent=1))
        return 0
    con = _console()
    if not args.family:
        t = _table("targets", "target", "cc", "kind", "features")
        kinds = {"": "generic", "a": "arch-specific", "f": "family-specific"}
        for tg in data["targets"]:
            t.add_row(tg["name"], tg["cc"], kinds[tg["variant"]], " ".join(tg["features"]))
        con.print(t)
    t = _table("families", "family", "ops", "dtypes", "targets", "ptx")
    for name, f in data["families"].items():
        t.add_row(
            name,
            " ".join(f["ops"]),
            " ".join(f["dtypes"]),
            " ".join(f["targets"]),
            " ".join(f["ptx"]),
        )
    con.print(t)
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .contents import inspect_path

    try:
        data = inspect_path(args.path)
    except (OSError, ValueError) as e:
        print(f"aotkernels inspect: {e}", file=sys.stderr)
        return 2
    bad = [n for n, f in data["families"].items() if f.get("problems")]
    if args.json:
        print(json.dumps(data, indent=1))
        return 1 if bad else 0
    con = _console()
    m = data["manifest"]
    head = f"{data['source']}"
    if m:
        head += f" — aotkernels {m['package_version']}, CUDA {m['toolkit_full']}"
        if m.get("toolkit_origin"):
            head += f" ({m['toolkit_origin']})"
        head += f", driver >= {m['driver_floor']}"
    if "wheel_bytes" in data:
        head += f", wheel {data['wheel_bytes']:,} B"
    con.print(head)
    t = _table(
        "images", "family", "target", "kind", "PTX ISA", "compressed", "bytes", "uncompressed"
    )
    for name, f in data["families"].items():
        for i in f["images"]:
            t.add_row(
                name,
                i["target"],
                i["kind"],
                i["ptx_isa"] or "",
                i["compression"] or "no",
                f"{i['bytes']:,}",
                f"{i['uncompressed_bytes']:,}",
            )
    con.print(t)
    t = _table("families", "family", "file bytes", "dtypes", "ops", "manifest check")
    for name, f in data["families"].items():
        check = "ok" if f.get("verified") else "; ".join(f.get("problems", [])) or "no manifest"
        t.add_row(
            name,
            f"{f['bytes']:,}",
            " ".join(f.get("dtypes", [])),
            " ".join(f.get("ops", [])),
            check,
        )
    con.print(t)
    t = _table("targets (all families)", "target", "images", "bytes", "share")
    total = data["total_bytes"] or 1
    for target, nbytes in data["targets"].items():
        n = sum(1 for f in data["families"].values() for i in f["images"] if i["target"] == target)
        t.add_row(target, str(n), f"{nbytes:,}", f"{100 * nbytes / total:.1f}%")
    con.print(t)
    con.print(f"total fatbin bytes: {data['total_bytes']:,}")
    return 1 if bad else 0


def _cmd_doctor(args: argparse.Namespace) -> int:
    from ._doctor import report
    from .errors import AotKernelsError

    try:
        rep = report(args.arch, args.driver)
    except (AotKernelsError, ValueError) as e:
        print(f"aotkernels doctor: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rep, indent=1))
        return 0
    con = _console()
    p = rep["package"]
    need = f", NVIDIA driver >= {p['min_driver']}" if p.get("min_driver") else ""
    con.print(
        f"{p['distribution']} {p['version']} built with CUDA {p['toolkit_full']}"
        + (f" ({p['toolkit_origin']})" if p.get("toolkit_origin") else "")
        + f" (needs a driver for CUDA >= {p['driver_floor']}{need})",
        highlight=False,
    )
    if "ptx_note" in rep:
        con.print(f"PTX: {rep['ptx_note']}", highlight=False)
    j = rep["jax"]
    if j["xla_extension"]:
        installed = f"{j['jaxlib']} (FFI API {j['jaxlib_ffi_api']})" if j["jaxlib"] else "none"
        con.print(
            f"jax.jit: XLA extension built against jaxlib {j['built_against_jaxlib']}'s FFI "
            f"headers (XLA FFI API {j['ffi_api']}); jaxlib installed: {installed}",
            highlight=False,
        )
        if j["problem"]:
            con.print(f"[red]jax.jit unavailable:[/red] {j['problem']}", highlight=False)
    else:
        con.print(
            "jax.jit: not in this build (no XLA extension: jaxlib was not installed when it was "
            "built); JAX arrays run eagerly only",
            highlight=False,
        )
    con.print(
        f"driver: CUDA {rep['driver']}"
        if rep["driver"]
        else f"driver: none ({rep.get('driver_error', 'not found')})",
        highlight=False,
    )
    if "driver_too_old" in rep:
        con.print(f"[red]driver too old:[/red] {rep['driver_too_old']}", highlight=False)
    if "simulated" in rep:
        s = rep["simulated"]
        con.print(f"simulating compute capability {s['cc']} under a CUDA {s['driver']} driver")
    for d in rep["devices"]:
        title = (
            f"device {d['index']}: {d['name']} (cc {d['cc']}, {d['sm_count']} SMs)"
            if d["index"] is not None
            else f"simulated device (cc {d['cc']})"
        )
        t = _table(title, "family", "image", "why")
        for fam, c in d["families"].items():
            image = c["image"] or "[red]none[/red]"
            if c.get("paths"):
                image += f" ({', '.join(c['paths'])})"
            t.add_row(fam, image, c["reason"])
        con.print(t)
    return 0


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="aotkernels", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("matrix", help="targets, dtypes and families of the arch matrix")
    p.add_argument("--family", help="show one family")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_matrix)
    p = sub.add_parser("inspect", help="what a wheel, install, folder or .fatbin holds")
    p.add_argument("path", nargs="?", help="default: this installed package")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_inspect)
    p = sub.add_parser("doctor", help="this machine's GPUs and the image each family runs")
    p.add_argument("--arch", help="simulate a device of this compute capability, e.g. 8.7")
    p.add_argument("--driver", help="simulate a driver of this CUDA version, e.g. 12.4")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_doctor)
    # Listed for --help only: main hands everything after "bench" to bench's own parser.
    sub.add_parser("bench", help="benchmarks on this GPU (see aotkernels bench --help)")
    return ap


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:  # the rest is bench's, a leading --help included
        from .bench import main as bench_main

        return bench_main(argv[1:])
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
