import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { cpuShareWanted, lambdaCpuShare, limitCpu } from '../../../../local/runtime/cpu-share.js';

describe("Lambda's CPU share for a process-isolated environment", () => {
  it('is memory ÷ 1,769 MB of one core, at most one', () => {
    expect(lambdaCpuShare(1769)).toBe(1);
    expect(lambdaCpuShare(192)).toBeCloseTo(0.1085, 4);
    expect(lambdaCpuShare(4000)).toBe(1);
  });

  it('puts the process in a cpu group of its own with that quota of a 100 ms period', () => {
    // Prepare: a folder standing in for the cgroup v1 cpu mount.
    const root = mkdtempSync(join(tmpdir(), 'cpu-share-'));
    writeFileSync(join(root, 'cpu.cfs_quota_us'), '-1');
    // Act
    const share = limitCpu(4242, 192, 'env1', root);
    // Assess
    const dir = join(root, 'threadgate-local', `${process.pid}-env1`);
    expect(share.error).toBeUndefined();
    expect(readFileSync(join(dir, 'cpu.cfs_period_us'), 'utf8')).toBe('100000');
    expect(readFileSync(join(dir, 'cpu.cfs_quota_us'), 'utf8')).toBe('10854');
    expect(readFileSync(join(dir, 'cgroup.procs'), 'utf8')).toBe('4242');
    writeFileSync(join(dir, 'cpu.stat'), 'nr_periods 10\nnr_throttled 4\nthrottled_time 250000000\n');
    expect(share.throttled()).toEqual({ periods: 10, throttledPeriods: 4, throttledMs: 250 });
  });

  it('says why, and sets no share, where no cpu controller is mounted', () => {
    const root = mkdtempSync(join(tmpdir(), 'no-cpu-'));
    mkdirSync(join(root, 'elsewhere'));
    const share = limitCpu(4242, 192, 'env1', root);
    expect(share.share).toBeUndefined();
    expect(share.error).toMatch(/no cgroup v1 cpu controller .* runs unlimited/);
  });

  it('is asked for with THREADGATE_LOCAL_CPU=lambda only', () => {
    expect(cpuShareWanted({ THREADGATE_LOCAL_CPU: 'lambda' })).toBe(true);
    expect(cpuShareWanted({})).toBe(false);
  });
});
