import { mkdirSync, writeFileSync } from 'node:fs';
import { bucketCounts } from '../stats.js';
import { type ChartPoint, renderChart } from '../svg.js';
import type { RunFacts } from './measures.js';
import type { BuildInput } from './types.js';

/** The run's chart (bench/svg.ts): threads in flight, the cap, outcomes per bucket, the steady window. */

function fmtNum(v: number): string {
  return Number.isFinite(v) ? v.toFixed(3) : 'n/a';
}

export function writeChart(i: BuildInput, f: RunFacts, file: string): void {
  const { window } = f;
  const outcomeEvents = f.withOutcome.map((inv) => ({
    t: f.tRel(inv.outcome?.at ?? 0),
    kind: inv.outcome?.status ?? 'unknown',
  }));
  const tEnd = Math.max(
    i.series.length ? (i.series[i.series.length - 1] as ChartPoint).t : 0,
    f.lastCompletion || 0,
  );
  const bucket = Math.max(1, Math.round(tEnd / 120));
  mkdirSync(i.outDir, { recursive: true });
  writeFileSync(
    file,
    renderChart({
      title: `threadgate bench: ${i.records} records, plan ${i.threads} threads, cap ${i.cap}, time scale ${i.timeScale}`,
      subtitle: `efficiency ${fmtNum(f.ssEff)} steady state, ${fmtNum(f.wholeEff)} whole run = ${fmtNum(f.wholeEff / i.model.limit)} of the limit ${fmtNum(i.model.limit)} (${i.pollSchedule.mode} schedule simulated: ${fmtNum(i.model.schedules[i.pollSchedule.mode].efficiency)}), utilization ${fmtNum(f.util)}, max in flight ${i.standin.maxInFlight}, ZERO_BALANCE ${i.standin.zeroBalance}`,
      series: i.series,
      outcomes: bucketCounts(outcomeEvents, 0, tEnd, bucket),
      bucketSeconds: bucket,
      window: window ? { from: window.from, to: window.to } : undefined,
    }),
  );
}
