/**
 * The pure pieces of the load run (local/load/run.ts, `threadgate load`): which messages each
 * producer sends (with the duplicates), what the run must show (the invariant check), and
 * the printed summary. Kept apart from the run so they can be tested without a stack.
 */

export interface LoadPlan {
  /** One list of message bodies per producer, in sending order. */
  streams: string[][];
  /** Record keys sent twice (each by two different producers when there are several). */
  duplicatedKeys: string[];
  /** Messages in all streams (records + duplicates). */
  messages: number;
}

/** A generated message body's record key. */
export function keyOf(body: string): string {
  return (JSON.parse(body) as { record_key: string }).record_key;
}

/**
 * Spreads `bodies` (one per distinct record) over `producers` streams round robin and sends
 * `round(records × duplicateRate)` of them, evenly spaced through the run, a second time from
 * the next producer. Half of the copies sit a few places after their original in that stream
 * (they arrive while the original is being worked: the lease decides), the other half half a
 * stream later (the original is finished by then: the copy is dropped).
 */
export function planLoad(bodies: string[], producers: number, duplicateRate: number): LoadPlan {
  if (!Number.isInteger(producers) || producers < 1)
    throw new RangeError('producers must be an integer >= 1');
  if (!(duplicateRate >= 0 && duplicateRate <= 1))
    throw new RangeError('duplicate rate must be within [0, 1]');
  const streams: string[][] = Array.from({ length: producers }, () => []);
  bodies.forEach((body, i) => {
    streams[i % producers]?.push(body);
  });
  const count = Math.round(bodies.length * duplicateRate);
  const copies: { stream: number; at: number; body: string }[] = [];
  const duplicatedKeys: string[] = [];
  for (let k = 0; k < count; k++) {
    const i = Math.floor((k * bodies.length) / count);
    const body = bodies[i] as string;
    const position = Math.floor(i / producers);
    const stream = (i + 1) % producers;
    const length = streams[stream]?.length ?? 0;
    const at = k % 2 === 0 ? position + 3 : position + Math.ceil(length / 2);
    copies.push({ stream, at: Math.min(at, length), body });
    duplicatedKeys.push(keyOf(body));
  }
  // Insert from the back so earlier positions stay valid.
  copies.sort((a, b) => b.at - a.at);
  for (const c of copies) streams[c.stream]?.splice(c.at, 0, c.body);
  return { streams, duplicatedKeys, messages: bodies.length + count };
}

export interface LoadSummary {
  records: number;
  messages: number;
  duplicates: number;
  producers: number;
  cap: number;
  plan_threads: number;
  time_scale: number;
  complete: boolean;
  /** Final outcome rows of the run's records by status. */
  outcomes: Record<string, number>;
  /** Records without a final outcome row at the end. */
  unfinished: number;
  in_php: number;
  /** Records that reached in.php more than once. */
  records_solved_twice: number;
  dlq: number;
  /** Messages still in the jobs queue at the end (visible or in flight). */
  queue_left: number;
  max_in_flight: number;
  zero_balance: number;
  wall_s: number;
  run_s: number;
  records_per_s: number;
  memory: {
    function_memory_mb: number;
    environments: number;
    /** The largest environment's estimate: a bare Node process + its peak V8 heap total + peak external. */
    environment_peak_mb: number;
    environment_peak_heap_used_mb: number;
    /** Peak RSS of the process running the runtime (all environments are its threads, plus the stand-ins and this driver). */
    process_peak_rss_mb: number;
    process_rss_per_environment_mb: number;
  };
  log_dir: string;
}

/** What a load run must show; each broken invariant as one sentence (empty: all hold). */
export function loadFailures(s: LoadSummary): string[] {
  const failures: string[] = [];
  if (!s.complete || s.unfinished > 0) failures.push(`${s.unfinished} records have no final outcome`);
  if (s.dlq > 0) failures.push(`${s.dlq} messages in the DLQ`);
  if (s.queue_left > 0) failures.push(`${s.queue_left} messages left in the jobs queue`);
  if (s.in_php !== s.records || s.records_solved_twice > 0) {
    failures.push(
      `${s.in_php} in.php requests for ${s.records} records (${s.records_solved_twice} records more than once)`,
    );
  }
  if (s.max_in_flight > s.cap) failures.push(`max in flight ${s.max_in_flight} above the cap ${s.cap}`);
  if (s.zero_balance > 0) failures.push(`${s.zero_balance} ERROR_ZERO_BALANCE answers`);
  const m = s.memory;
  if (m.environment_peak_mb > m.function_memory_mb) {
    failures.push(
      `an environment peaked at ~${m.environment_peak_mb} MB, above the function's ${m.function_memory_mb} MB`,
    );
  }
  if (m.environments > 0 && m.process_rss_per_environment_mb > m.function_memory_mb) {
    failures.push(
      `the runtime process used ${m.process_rss_per_environment_mb} MB per environment, above the function's ${m.function_memory_mb} MB`,
    );
  }
  return failures;
}

export function formatLoadSummary(s: LoadSummary, failures: string[]): string {
  const outcomes = Object.entries(s.outcomes)
    .sort()
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  const m = s.memory;
  const lines = [
    `load: ${s.records} records + ${s.duplicates} duplicates = ${s.messages} messages from ${s.producers} producers`,
    `  cap ${s.cap} (plan ${s.plan_threads} threads), time scale ${s.time_scale}`,
    `  outcomes: ${outcomes || 'none'}; unfinished ${s.unfinished}`,
    `  in.php: ${s.in_php} for ${s.records} records (${s.records_solved_twice} records more than once)`,
    `  DLQ ${s.dlq}, jobs queue left ${s.queue_left}`,
    `  max in flight ${s.max_in_flight} (cap ${s.cap}), ZERO_BALANCE ${s.zero_balance}`,
    `  wall ${s.wall_s} s (run ${s.run_s} s, ${s.records_per_s} records/s)`,
    `  memory: ${m.environments} environments, largest ~${m.environment_peak_mb} MB (heap used ${m.environment_peak_heap_used_mb} MB) of ${m.function_memory_mb} MB; runtime process peak RSS ${m.process_peak_rss_mb} MB (${m.process_rss_per_environment_mb} MB per environment)`,
    `  logs: ${s.log_dir}`,
    failures.length ? `FAILED: ${failures.join('; ')}` : 'every invariant held',
  ];
  return `${lines.join('\n')}\n`;
}
