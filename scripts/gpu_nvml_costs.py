"""What each NVML call vramd makes costs on this GPU (issue 37: where the slow
tier's time goes on real hardware). Times every call of vramd's fast and
slow tiers through pynvml on GPU 0: median and p90 wall time, and the
median CPU time of the calling thread (an ioctl the driver serves by
spinning shows as CPU, one that sleeps does not). Process-list calls are
timed with no process on the GPU and again with WORKERS PyTorch processes.

Usage: python3 scripts/gpu_nvml_costs.py [OUT_JSON]; needs pynvml (and torch
for the workers). Each call runs until 200 calls or 0.4 s, after 3 warm-ups.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import pynvml as N

WORKERS = int(os.environ.get("GPU_COST_WORKERS", "8"))
WORKER = "import time, torch; torch.cuda.init(); x = torch.empty(256 << 20, dtype=torch.uint8, device='cuda:0'); print('ready', flush=True); time.sleep(600)"


def timed(call):
    for _ in range(3):
        try:
            call()
        except N.NVMLError:
            pass
    walls, cpus, error = [], [], None
    started = time.perf_counter()
    while len(walls) < 200 and time.perf_counter() - started < 0.4:
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        try:
            call()
        except N.NVMLError as failure:
            error = str(failure)
        cpus.append(time.thread_time_ns() - cpu)
        walls.append(time.perf_counter_ns() - wall)
    walls.sort()
    return {"median_us": statistics.median(walls) / 1e3, "p90_us": walls[int(len(walls) * 0.9)] / 1e3,
            "cpu_median_us": statistics.median(cpus) / 1e3, "calls": len(walls), "error": error}


def calls(handle):
    return {
        "memory_info_v2": lambda: N.nvmlDeviceGetMemoryInfo(handle, version=N.nvmlMemory_v2),
        "utilization_rates": lambda: N.nvmlDeviceGetUtilizationRates(handle),
        "compute_processes": lambda: N.nvmlDeviceGetComputeRunningProcesses(handle),
        "graphics_processes": lambda: N.nvmlDeviceGetGraphicsRunningProcesses(handle),
        "mps_processes": lambda: N.nvmlDeviceGetMPSComputeRunningProcesses(handle),
        "process_utilization": lambda: N.nvmlDeviceGetProcessUtilization(handle, 0),
        "temperature": lambda: N.nvmlDeviceGetTemperature(handle, N.NVML_TEMPERATURE_GPU),
        "power_usage": lambda: N.nvmlDeviceGetPowerUsage(handle),
        "enforced_power_limit": lambda: N.nvmlDeviceGetEnforcedPowerLimit(handle),
        "total_energy_consumption": lambda: N.nvmlDeviceGetTotalEnergyConsumption(handle),
        "clock_info_graphics": lambda: N.nvmlDeviceGetClockInfo(handle, N.NVML_CLOCK_GRAPHICS),
        "clock_info_sm": lambda: N.nvmlDeviceGetClockInfo(handle, N.NVML_CLOCK_SM),
        "clock_info_mem": lambda: N.nvmlDeviceGetClockInfo(handle, N.NVML_CLOCK_MEM),
        "clock_info_video": lambda: N.nvmlDeviceGetClockInfo(handle, N.NVML_CLOCK_VIDEO),
        "throttle_reasons": lambda: N.nvmlDeviceGetCurrentClocksThrottleReasons(handle),
        "performance_state": lambda: N.nvmlDeviceGetPerformanceState(handle),
        "encoder_utilization": lambda: N.nvmlDeviceGetEncoderUtilization(handle),
        "decoder_utilization": lambda: N.nvmlDeviceGetDecoderUtilization(handle),
        "ecc_mode": lambda: N.nvmlDeviceGetEccMode(handle),
        "total_ecc_errors_corrected": lambda: N.nvmlDeviceGetTotalEccErrors(
            handle, N.NVML_MEMORY_ERROR_TYPE_CORRECTED, N.NVML_VOLATILE_ECC),
        "total_ecc_errors_uncorrected": lambda: N.nvmlDeviceGetTotalEccErrors(
            handle, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, N.NVML_VOLATILE_ECC),
        "remapped_rows_fields": lambda: N.nvmlDeviceGetFieldValues(handle, [142, 143, 144, 145]),
        "retired_pages_single": lambda: N.nvmlDeviceGetRetiredPages(
            handle, N.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
        "retired_pages_double": lambda: N.nvmlDeviceGetRetiredPages(
            handle, N.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERRORS),
        "bar1_memory_info": lambda: N.nvmlDeviceGetBAR1MemoryInfo(handle),
        "mig_mode": lambda: N.nvmlDeviceGetMigMode(handle),
        "compute_mode": lambda: N.nvmlDeviceGetComputeMode(handle),
        "handle_by_index": lambda: N.nvmlDeviceGetHandleByIndex(0),
    }


def table(title, figures):
    print(f"\n== {title}")
    print(f"{'call':30} {'median us':>10} {'p90 us':>9} {'cpu us':>8} {'calls':>6}  error")
    for name, f in figures.items():
        print(f"{name:30} {f['median_us']:10.1f} {f['p90_us']:9.1f} {f['cpu_median_us']:8.1f} {f['calls']:6}  {f['error'] or ''}")


def main():
    N.nvmlInit()
    handle = N.nvmlDeviceGetHandleByIndex(0)
    report = {"driver": N.nvmlSystemGetDriverVersion(), "name": N.nvmlDeviceGetName(handle)}
    report["no processes"] = {name: timed(call) for name, call in calls(handle).items()}
    table(f"{report['name']} driver {report['driver']}, no process on the GPU", report["no processes"])
    workers = [subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True)
               for _ in range(WORKERS)]
    try:
        for worker in workers:
            worker.stdout.readline()
        listing = {name: call for name, call in calls(handle).items()
                   if name.endswith("processes") or name == "process_utilization"}
        report[f"{WORKERS} processes"] = {name: timed(call) for name, call in listing.items()}
        table(f"{WORKERS} PyTorch processes on the GPU", report[f"{WORKERS} processes"])
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
