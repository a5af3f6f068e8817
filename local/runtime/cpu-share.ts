import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * Lambda's CPU share for a process-isolated execution environment (THREADGATE_LOCAL_CPU=lambda):
 * Lambda gives CPU in proportion to memory, one vCPU at 1,769 MB
 * (docs.aws.amazon.com/lambda/latest/dg/configuration-memory.html), so at 192 MB an environment
 * and all its lanes share 0.11 of a core. Here each environment's process is put in a cgroup v1
 * `cpu` group of its own whose CFS quota is that share of the period: the kernel stops the
 * process for the rest of a period once it has used its share, as Lambda's Firecracker VM does.
 *
 * Needs a writable cgroup v1 `cpu` hierarchy (as root on this machine); where none can be made the
 * environment runs unlimited and says why (`CpuShare.error`), and no CPU-share figure is reported.
 */

/** Memory (MB) at which Lambda gives one full vCPU. */
export const MB_PER_VCPU = 1769;
/** The CFS period the quota is a share of (the kernel's default, µs). */
const PERIOD_US = 100_000;
const CPU_ROOT = '/sys/fs/cgroup/cpu';

/** Whether environments should run under Lambda's CPU share (THREADGATE_LOCAL_CPU=lambda). */
export function cpuShareWanted(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.THREADGATE_LOCAL_CPU === 'lambda';
}

/** The share of one core Lambda gives `memoryMb` (capped at 1: more memory gives more cores). */
export function lambdaCpuShare(memoryMb: number): number {
  return Math.min(1, memoryMb / MB_PER_VCPU);
}

export interface CpuShare {
  /** The share of one core the environment's process may use; undefined when no group could be made. */
  share?: number;
  /** Why no group could be made. */
  error?: string;
  /** The group's throttling so far (cpu.stat): periods throttled and time throttled (ms). */
  throttled(): { periods: number; throttledPeriods: number; throttledMs: number } | undefined;
  /** Removes the group (after the process has exited). */
  remove(): void;
}

/**
 * A cgroup for one environment's process `pid` (already running) at Lambda's share for
 * `memoryMb`, or a CpuShare with `error` when none can be made. `root`: the cgroup v1 `cpu`
 * mount (a test points it elsewhere).
 */
export function limitCpu(pid: number, memoryMb: number, name: string, root = CPU_ROOT): CpuShare {
  const share = lambdaCpuShare(memoryMb);
  const dir = join(root, 'threadgate-local', `${process.pid}-${name}`);
  const none = (error: string): CpuShare => ({ error, throttled: () => undefined, remove: () => undefined });
  if (!existsSync(join(root, 'cpu.cfs_quota_us'))) {
    return none(`no cgroup v1 cpu controller at ${root} (cpu.cfs_quota_us): the environment runs unlimited`);
  }
  try {
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'cpu.cfs_period_us'), String(PERIOD_US));
    writeFileSync(join(dir, 'cpu.cfs_quota_us'), String(Math.max(1000, Math.round(PERIOD_US * share))));
    writeFileSync(join(dir, 'cgroup.procs'), String(pid));
  } catch (err) {
    return none(
      `could not make a cpu cgroup at ${dir} (${err instanceof Error ? err.message : String(err)}): run as root with cgroup v1's cpu controller mounted read-write; the environment runs unlimited`,
    );
  }
  return {
    share,
    throttled: () => {
      try {
        const stat = readFileSync(join(dir, 'cpu.stat'), 'utf8');
        const field = (k: string) => Number(new RegExp(`^${k} (\\d+)$`, 'm').exec(stat)?.[1] ?? Number.NaN);
        return {
          periods: field('nr_periods'),
          throttledPeriods: field('nr_throttled'),
          throttledMs: Math.round(field('throttled_time') / 1e6),
        };
      } catch {
        return undefined;
      }
    },
    remove: () => {
      try {
        rmdirSync(dir);
      } catch {
        // Still has a process (it is being killed), or already gone: the parent folder is reused.
      }
    },
  };
}
