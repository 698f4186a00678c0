"""``slurm-keda demand`` over a fake slurmrestd serving the 26.05 recording: the console script in a process
(the default JSON, and beside ``serve``), the rest through ``cli.main`` in the test's process."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from testkit.fake_slurmrestd import FakeSlurmrestd, serve
from testkit.paths import ROOT
from testkit.serve_process import run_command

DATA = ROOT / "tests" / "data" / "recorded" / "slurm-26.05.5"
SCRIPT = Path(sys.executable).parent / "slurm-keda"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="console script not installed (make venv)")


async def run(url: str, *args: str, process: bool = False) -> tuple[int, str, str]:
    argv = ["demand", "--slurmrestd-url", url, "--jwt", "good-token", "--retries", "0", *args]
    return await run_command(argv, process=process)


async def test_json_default_is_one_target_per_partition() -> None:
    async with serve(FakeSlurmrestd(DATA)) as url:
        code, out, err = await run(url, "--format", "json", process=True)
    assert code == 0, err
    rows = {r["target"]: r for r in json.loads(out)}
    assert set(rows) == {"cpu", "gpu", "cloud", "dyn"}
    # the hand-computed numbers of tests/unit/test_demand.py::test_recorded_2605_cpu_and_gpu
    cpu = rows["cpu"]
    assert (cpu["busy"], cpu["needed"], cpu["desired"], cpu["eligible_pending"]) == (3, 3, 6, 2)
    assert cpu["ignored_pending"]["JobArrayTaskLimit"] == 18
    assert (rows["gpu"]["busy"], rows["gpu"]["desired"]) == (1, 2)
    # dyn has no nodes and no configured shape: nothing can be sized, and it says so
    assert (rows["dyn"]["desired"], rows["dyn"]["shape_source"]) == (0, "none")
    assert any("no configured shape" in r for r in rows["dyn"]["reasons"])


async def test_target_flag_gives_the_scale_from_zero_shape() -> None:
    async with serve(FakeSlurmrestd(DATA)) as url:
        code, out, err = await run(
            url, "--target", "partition=dyn,nodeset=ns-dyn,nodeFeature=dyn,cpusPerNode=8,memoryPerNode=16000"
        )
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["TARGET", "PARTITION", "DESIRED"]
    row = lines[1].split()
    assert row[:7] == ["ns-dyn", "dyn", "1", "0", "1", "0", "1"]  # desired, busy, needed, nodes, eligible
    assert "8/16000/0" in lines[1] and "(config)" in lines[1]
    assert "ns-dyn:" in lines


async def test_target_flag_takes_a_list_value() -> None:
    # featuresPerNode=a,b inside --target k=v,...: the item without "=" continues the value
    async with serve(FakeSlurmrestd(DATA)) as url:
        code, out, err = await run(
            url,
            "--target",
            "partition=dyn,nodeset=ns-dyn,featuresPerNode=gpu,ib,cpusPerNode=8",
            "--format",
            "json",
        )
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["target"], row["shape"]["cpus"]) == ("ns-dyn", 8)
    async with serve(FakeSlurmrestd(DATA)) as url:
        code, _, err = await run(url, "--target", "ib,partition=dyn")
    assert code == 2 and "'ib' is not KEY=VALUE" in err


async def test_bad_target_names_the_key() -> None:
    async with serve(FakeSlurmrestd(DATA)) as url:
        code, _, err = await run(url, "--target", "partiton=dyn")
    assert code == 2
    assert "'partiton'" in err and "unknown key" in err


async def test_no_jobs_data_is_an_error_not_zero_demand() -> None:
    async with serve(FakeSlurmrestd(DATA, faults={"jobs": "status:500"})) as url:
        code, out, err = await run(url, "--format", "json")
    assert code == 1 and out == ""
    assert "no jobs or nodes data" in err


async def test_serve_takes_the_same_target_flags_as_demand(tmp_path: Path) -> None:
    """One CLI: ``serve --target`` (it wanted a YAML file) — so ``make demo``'s page and printout agree."""
    import aiohttp

    from testkit.scale_harness import metric_sample
    from testkit.tools import free_port

    flags = ["--target", "partition=dyn,nodeset=ns-dyn,nodeFeature=dyn,cpusPerNode=8,memoryPerNode=16000"]
    async with serve(FakeSlurmrestd(DATA)) as url:
        code, out, err = await run(url, "--format", "json", *flags)
        assert code == 0, err
        (printed,) = json.loads(out)
        port = free_port()
        proc = await asyncio.create_subprocess_exec(
            str(SCRIPT),
            "serve",
            *("--slurmrestd-url", url, "--jwt", "good-token", "--listen-address", "127.0.0.1"),
            *("--listen-port", str(port), *flags),
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        served = None
        try:
            async with aiohttp.ClientSession() as s:
                for _ in range(200):
                    try:
                        async with s.get(f"http://127.0.0.1:{port}/metrics") as r:
                            body = await r.text()
                        labels = {"target": "ns-dyn", "partition": "dyn"}
                        served = metric_sample(body, "slurm_autoscaler_desired_nodes", **labels)
                        if served is not None:
                            break
                    except aiohttp.ClientError:
                        pass
                    await asyncio.sleep(0.05)
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 15)
    assert printed["target"] == "ns-dyn" and served == printed["desired"] == 1
