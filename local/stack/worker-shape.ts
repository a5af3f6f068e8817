/** The worker as deployed (./observation.ts deployedWorker reads it): pure, so reports can print it. */
export interface DeployedWorker {
  worker_memory_mb: number;
  lanes: { setting: number; r: number; L: number; lambda_quota_needed: number };
}

/** One line about the deployed worker, as the local run, the bench and the chaos run print it. */
export function describeWorker(w: DeployedWorker): string {
  return `${w.worker_memory_mb} MB, lanes ${w.lanes.setting}: r ${w.lanes.r} invocations of L ${w.lanes.L} lanes`;
}
