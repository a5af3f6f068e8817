import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import { ConfigError } from '../../functions/common/errors.js';
import { MAX_LANES } from '../../functions/pipeline/lanes.js';
import { type ExternalCaptchaai, externalCaptchaai } from '../../local/stack/captchaai.js';
import { type AnyLocalStack, startLocalStack } from '../../local/stack/local-stack.js';
import { deployedWorker } from '../../local/stack/observation.js';
import {
  generatedRecords,
  type RecordMix,
  readRecordsFile,
  sampleRecords,
} from '../../local/stack/records.js';
import { type RunProgress, type RunSummary, runRecords } from '../../local/stack/run.js';
import { describeWorker } from '../../local/stack/worker-shape.js';
import { CliError, EXIT } from '../exit-codes.js';
import { parseMixOption } from './bench.js';
import { KEEP_ENV_FILE, registerLocalEnv, removeKeepEnv, writeKeepEnv } from './local-env.js';
import { collectLatency, LATENCY_HELP, latencyFromOptions } from './standin.js';

interface LocalOptions {
  records?: string;
  threads: string;
  reserve: string;
  timeScale: string;
  json?: boolean;
  keep?: boolean;
  timeout: string;
  freshSynth?: boolean;
  captchaaiUrl?: string;
  allowRemoteCaptchaai?: boolean;
  mix?: RecordMix;
  latency: string[];
  lanes?: string;
  workerMemory?: string;
}

/** What `threadgate local` runs, from its options and the environment, validated before anything starts. */
interface LocalRun {
  /** Plan threads of the stand-in; undefined with an external server (its threadsinfo says). */
  threads: number | undefined;
  reserve: number;
  timeScale: number;
  timeoutS: number;
  fileRecords: string[] | undefined;
  generated: number | undefined;
  mix: RecordMix | undefined;
  captchaai: ExternalCaptchaai | undefined;
  /** Deploy-time settings given on the command line (lanes, workerMemoryMb); only those pinned. */
  settings: { lanes?: number; workerMemoryMb?: number };
}

function readLocalRun(
  options: LocalOptions,
  command: Command,
  env: NodeJS.ProcessEnv = process.env,
): LocalRun {
  const given = (name: string) => command.getOptionValueSource(name) === 'cli';
  let captchaai: ExternalCaptchaai | undefined;
  if (options.captchaaiUrl !== undefined) {
    try {
      captchaai = externalCaptchaai(options.captchaaiUrl, env.CAPTCHAAI_API_KEY, {
        allowRemote: options.allowRemoteCaptchaai,
      });
    } catch (err) {
      if (err instanceof ConfigError) throw new CliError(err.message, EXIT.usage);
      throw err;
    }
    if (given('threads'))
      throw new CliError(
        "--threads is the stand-in's plan; with --captchaai-url the server's threadsinfo gives it",
        EXIT.usage,
      );
  } else if (options.allowRemoteCaptchaai) {
    throw new CliError('--allow-remote-captchaai only goes with --captchaai-url', EXIT.usage);
  }
  // An external server answers in its own time: scale 1 unless told (another stand-in may run faster).
  const timeScale = Number(captchaai && !given('timeScale') ? 1 : options.timeScale);
  if (!Number.isFinite(timeScale) || timeScale <= 0 || timeScale > 10) {
    throw new CliError(`--time-scale must be a number in (0, 10], got "${options.timeScale}"`, EXIT.usage);
  }
  if (captchaai && !captchaai.loopback && timeScale !== 1) {
    throw new CliError(
      '--time-scale must be 1 with a remote CaptchaAI server: shorter waits poll it faster than its request limits allow',
      EXIT.usage,
    );
  }
  let fileRecords: string[] | undefined;
  let generated: number | undefined;
  if (options.records !== undefined) {
    if (/^\d+$/.test(options.records)) generated = positiveInt('records', options.records);
    else if (existsSync(options.records)) fileRecords = readRecordsFile(options.records);
    else throw new CliError(`--records: no such file "${options.records}" (or give a number)`, EXIT.usage);
  }
  if (options.mix && fileRecords)
    throw new CliError(
      '--mix chooses the types of generated records; a --records file has its own',
      EXIT.usage,
    );
  if (captchaai && !captchaai.loopback && !fileRecords) {
    throw new CliError(
      "with a remote CaptchaAI server give --records FILE: generated records carry the target stand-in's made-up sitekey, which a real service cannot solve",
      EXIT.usage,
    );
  }
  return {
    threads: captchaai ? undefined : positiveInt('threads', options.threads),
    reserve: positiveInt('reserve', options.reserve, 0),
    timeScale,
    timeoutS: positiveInt('timeout', options.timeout),
    fileRecords,
    generated,
    mix: options.mix,
    captchaai,
    settings: {
      ...(options.lanes !== undefined ? { lanes: positiveInt('lanes', options.lanes, 1, MAX_LANES) } : {}),
      ...(options.workerMemory !== undefined
        ? { workerMemoryMb: positiveInt('worker-memory', options.workerMemory, 128, 10_240) }
        : {}),
    },
  };
}

function positiveInt(name: string, raw: string, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `>= ${min}` : `from ${min} to ${max}`;
    throw new CliError(`--${name} must be a whole number ${range}, got "${raw}"`, EXIT.usage);
  }
  return n;
}

/** One status line: done/total, in flight vs cap vs plan threads, outcomes by status. */
export function progressLine(p: RunProgress): string {
  const outcomes = Object.entries(p.outcomes)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([status, n]) => `${status} ${n}`)
    .join(', ');
  const paused = p.paused ? ` | PAUSED: ${p.paused.reason ?? p.paused.code ?? 'no reason given'}` : '';
  return (
    `done ${p.done}/${p.total} (sent ${p.sent}) | in flight ${p.inFlight} / cap ${p.cap} / plan ${p.planThreads}` +
    ` | ${outcomes || 'no outcomes yet'} | dlq ${p.dlq} | ${p.elapsedS.toFixed(1)} s${paused}`
  );
}

/** `a 2, b 1`, or `none`. */
function countsText(counts: Record<string, number>): string {
  return (
    Object.entries(counts)
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none'
  );
}

export function summaryText(s: RunSummary): string {
  const dlqReasons = Object.keys(s.dlq_reasons).length ? ` (${countsText(s.dlq_reasons)})` : '';
  const lines = [
    `records        ${s.records}${s.complete ? '' : ' (not all finished)'}`,
    `outcomes       ${countsText(s.outcomes)}`,
    `dlq            ${s.dlq}${dlqReasons}`,
    `target refused ${countsText(s.target_rejections)} (form POSTs the target stand-in refused, with a 4xx/5xx or a 200 error page)`,
    s.captcha_submits === null
      ? 'captcha submits not counted (an external CaptchaAI server)'
      : `captcha submits ${s.captcha_submits} (in.php, counted by the stand-in)`,
    s.max_in_flight_source === 'standin'
      ? `max in flight  ${s.max_in_flight} (stand-in) with cap ${s.cap} of ${s.plan_threads} plan threads; ZERO_BALANCE answers ${s.zero_balance}`
      : `max in flight  ${s.max_in_flight} (worker invocations) with cap ${s.cap} of ${s.plan_threads} plan threads`,
    efficiencyText(s.efficiency),
    `worker runs    ${s.invocations}`,
    `elapsed        ${s.elapsed_s} s (deploy ${s.deploy_s ?? '-'} s before that)`,
    `logs           ${s.log_dir}`,
  ];
  if (s.paused)
    lines.push(
      `PAUSED         ${s.paused.reason ?? ''} (${s.paused.code ?? 'no code'}) by ${s.paused.by ?? '?'}`,
    );
  return lines.join('\n');
}

function efficiencyText(e: RunSummary['efficiency']): string {
  if (!e) return 'efficiency     not measured (the worker log is not on this machine)';
  if (e.value === null) return 'efficiency     - (no record reached a solve)';
  const from =
    e.source === 'standin'
      ? "the stand-in's busy thread time"
      : "the worker's own solve times, submit to answer, incl. the wait for the next poll";
  return `efficiency     ${e.value.toFixed(3)} of ${e.plan_threads} plan threads over ${e.window_s} s, first submit to last answer (${from}; ${e.solves} solves)`;
}

function keepText(stack: AnyLocalStack): string {
  return [
    'The local stack keeps running. In another shell:',
    '  eval "$(npx threadgate local env)"   # AWS endpoint, stack, CAPTCHAAI_URL/_API_KEY/_TIME_SCALE',
    '  npx threadgate status        # then enqueue, outcomes, pause, resume, redrive, solve, threads …',
    `(the exports are in ${KEEP_ENV_FILE}, mode 0600, while this runs)`,
    stack.captcha
      ? `CaptchaAI stand-in: ${stack.captcha.url} (control: POST ${stack.captcha.url}/control, e.g. {"threads":4})`
      : `CaptchaAI server: ${stack.captchaaiUrl} (--captchaai-url; key from CAPTCHAAI_API_KEY)`,
    `Target site stand-in: ${stack.site.url}/form/<record key> (sitekey ${stack.site.sitekey})`,
    `Queue: ${stack.outputs.QueueUrl}`,
    `Logs: ${stack.logDir}`,
    `Ctrl-C (or SIGTERM/SIGHUP to this process or its npm/npx parent) stops everything; pid ${process.pid}.`,
  ].join('\n');
}

/**
 * Calls `onGone` once the process that started this one exits. npm and npx do not always pass a
 * signal on (`kill -TERM <npx pid>` ends npx and left this process serving); without a parent
 * nobody is left to stop what this process started, so it stops it itself.
 */
function watchParent(onGone: () => void, everyMs = 500): () => void {
  const parent = process.ppid;
  const timer = setInterval(() => {
    try {
      process.kill(parent, 0);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ESRCH') return;
      clearInterval(timer);
      onGone();
    }
  }, everyMs);
  timer.unref();
  return () => clearInterval(timer);
}

const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/** The `local` command, its options and help (its action is runLocal). */
function localCommand(program: Command): Command {
  return program
    .command('local')
    .description(
      'Run threadgate on this machine: moto (AWS emulator), CaptchaAI and target-site stand-ins, the real CDK app deployed to moto, and a local Lambda runtime; then enqueue records and watch them finish.',
    )
    .option(
      '--records <FILE|N>',
      'a JSONL file whose lines are sent verbatim, or a number of generated records (default: a sample mix incl. a few bad records)',
    )
    .option(
      '--threads <n>',
      "plan threads of the CaptchaAI stand-in (with --captchaai-url: the server's threadsinfo)",
      '8',
    )
    .option('--reserve <n>', 'plan threads kept free; the cap is threads − reserve', '2')
    .option(
      '--time-scale <x>',
      'multiplies CaptchaAI latencies, client waits and the one-minute adjuster rule (1 with --captchaai-url)',
      '0.01',
    )
    .option(
      '--mix <TYPE=WEIGHT,…>',
      'CAPTCHA types of the generated records by weight, as in `threadgate bench`, e.g. turnstile=1,recaptcha_v3=2 (default: every type in turn)',
      parseMixOption,
    )
    .option(
      '--captchaai-url <URL>',
      'use this CaptchaAI-compatible server instead of the stand-in (key from CAPTCHAAI_API_KEY); loopback hosts only unless --allow-remote-captchaai',
    )
    .option(
      '--allow-remote-captchaai',
      'let --captchaai-url name a host that is not loopback (e.g. https://ocr.captchaai.com): the key and the tasks go there',
    )
    .option('--latency <TYPE=SPEC>', `${LATENCY_HELP}; the stand-in only`, collectLatency, [])
    .option(
      '--lanes <k>',
      'the most lanes one worker invocation may run (deploy-time setting lanes; default 1): the cap is carried by r invocations of L lanes',
    )
    .option(
      '--worker-memory <mb>',
      "the worker's memory (deploy-time setting workerMemoryMb; default its default, which follows --lanes)",
    )
    .option(
      '--json',
      'print one JSON summary object on stdout (with the lanes deployed, r, L and the worker memory)',
    )
    .option(
      '--keep',
      'keep everything running afterwards and print the endpoints and environment for the CLI',
    )
    .option('--timeout <s>', 'give up waiting for outcomes after this many seconds', '900')
    .option('--fresh-synth', 'synthesize the CDK app even when a cached assembly exists')
    .addHelpText(
      'after',
      `
Examples:
  npm run local                                  # sample records, 8 threads, reserve 2
  npx threadgate local --records 500 --threads 20 --reserve 4
  npx threadgate local --records jobs.jsonl --json
  npx threadgate local --keep                    # then use the other commands against it
  npx threadgate local --records 200 --mix turnstile=1,recaptcha_v2=3
  npx threadgate standin --port 8089 --threads 5 --key "$KEY" --time-scale 0.05 &
  CAPTCHAAI_API_KEY="$KEY" npx threadgate local --captchaai-url http://127.0.0.1:8089 --time-scale 0.05 --records 100

With --captchaai-url the stack uses that server instead of starting its stand-in: the plan's
threads come from its threadsinfo, the time scale defaults to 1 (match a faster stand-in with
--time-scale), and the summary's efficiency comes from the worker's own solve times. A host
that is not loopback is refused unless --allow-remote-captchaai is given; then --time-scale
must be 1 and the records must come from --records FILE (forms on loopback: the local
allowlist is 127.0.0.1 and localhost).

Exit codes: 0 every record has an outcome or a DLQ entry; 3 the pipeline paused (stop-class
CaptchaAI error); 1 timed out or failed; 64 usage error. Needs Python 3 for moto[server] 5.x
(which Python, in which order, and $THREADGATE_PYTHON: docs/local-stack.md, "Python"). No Docker.`,
    );
}

export function registerLocal(program: Command): void {
  const local = localCommand(program).action(runLocal);
  registerLocalEnv(local);
}

/** Signal handlers, the parent watch and the one stop of everything the command started. */
function lifecycle(say: (line: string) => void) {
  const aborter = new AbortController();
  const held: { stack: AnyLocalStack | undefined } = { stack: undefined };
  let stopping: Promise<void> | undefined;
  const stop = () => {
    stopping ??= (async () => {
      aborter.abort();
      removeKeepEnv();
      await held.stack?.stop();
    })();
    return stopping;
  };
  let signalled = false;
  const onSignal = () => {
    if (signalled) return;
    signalled = true;
    say('stopping every process started …');
    void stop().then(() => process.exit(EXIT.interrupted));
  };
  for (const signal of STOP_SIGNALS) process.on(signal, onSignal);
  const unwatch = watchParent(onSignal);
  return {
    signal: aborter.signal,
    held,
    /** Removes the handlers and stops everything. */
    async end(): Promise<void> {
      for (const signal of STOP_SIGNALS) process.off(signal, onSignal);
      unwatch();
      await stop();
    },
  };
}

async function runLocal(options: LocalOptions, command: Command): Promise<void> {
  const run = readLocalRun(options, command);
  const latency = latencyFromOptions(options.latency);
  if (run.captchaai && options.latency.length > 0) {
    throw new CliError('--latency sets the stand-in: it cannot be used with --captchaai-url', EXIT.usage);
  }
  const err = process.stderr;
  const tty = err.isTTY === true;
  const say = (line: string) => err.write(tty ? `\r\x1b[2K${line}\n` : `${line}\n`);
  const life = lifecycle(say);
  try {
    const started = Date.now();
    life.held.stack = await startLocalStack({
      threads: run.threads,
      reserve: run.reserve,
      timeScale: run.timeScale,
      captchaai: run.captchaai,
      freshSynth: options.freshSynth,
      // Only pinned settings are passed: the defaults keep the cached synth of a plain stack.
      ...(Object.keys(run.settings).length > 0 ? { settings: run.settings } : {}),
      onPhase: (m) => say(`… ${m}`),
    });
    const stack = life.held.stack;
    if (life.signal.aborted) return;
    // Before any record is sent, so every task is drawn from these distributions.
    stack.captcha?.setLatency(latency);
    const t = stack.deploy?.timings;
    if (t) {
      say(
        `deployed ${stack.stackName} in ${(t.totalMs / 1000).toFixed(1)} s (synth ${t.synthCached ? 'cached' : `${(t.synthMs / 1000).toFixed(1)} s`}, bootstrap ${(t.bootstrapMs / 1000).toFixed(1)} s, deploy ${(t.deployMs / 1000).toFixed(1)} s; ${((Date.now() - started) / 1000).toFixed(1)} s with startup)`,
      );
    }
    const worker = await deployedWorker(stack);
    say(
      `worker: ${describeWorker(worker)} (Lambda quota needed on AWS: ${worker.lanes.lambda_quota_needed})`,
    );
    const summary = await enqueueAndWait(stack, run, life.signal, say);
    if (life.signal.aborted) return;
    await finish(stack, { ...summary, ...worker }, options, run.timeoutS, life.signal, say);
  } finally {
    await life.end();
  }
}

/** Sends the records and waits for their outcomes, showing progress on stderr. */
async function enqueueAndWait(
  stack: AnyLocalStack,
  run: LocalRun,
  signal: AbortSignal,
  say: (line: string) => void,
): Promise<RunSummary> {
  const err = process.stderr;
  const tty = err.isTTY === true;
  const prefix = `local-${randomBytes(3).toString('hex')}`;
  const bodies =
    run.fileRecords ??
    (run.generated !== undefined
      ? generatedRecords(stack.site.url, stack.site.sitekey, run.generated, prefix, run.mix)
      : sampleRecords(stack.site.url, stack.site.sitekey, prefix, undefined, run.mix));
  say(
    `enqueuing ${bodies.length} records (cap ${Math.max(0, stack.threads - run.reserve)}, plan ${stack.threads} threads)`,
  );
  let lastPlain = 0;
  const summary = await runRecords(stack, bodies, {
    signal,
    timeoutMs: run.timeoutS * 1000,
    onProgress: (p) => {
      if (tty) err.write(`\r\x1b[2K${progressLine(p)}`);
      else if (Date.now() - lastPlain >= 2000) {
        lastPlain = Date.now();
        err.write(`${progressLine(p)}\n`);
      }
    },
  });
  if (tty) err.write('\r\x1b[2K');
  return summary;
}

/** Prints the summary, keeps the stack running with --keep, and sets the exit code. */
async function finish(
  stack: AnyLocalStack,
  summary: RunSummary,
  options: LocalOptions,
  timeoutS: number,
  signal: AbortSignal,
  say: (line: string) => void,
): Promise<void> {
  if (options.json) process.stdout.write(`${JSON.stringify(summary)}\n`);
  else process.stdout.write(`${summaryText(summary)}\n`);
  if (summary.paused) {
    say(
      `The pipeline paused on a stop-class CaptchaAI error; records wait in the queue. Fix the cause, then \`threadgate resume\` and \`threadgate redrive\`${options.keep ? '' : ' (run with --keep to do that here)'}.`,
    );
  }
  if (options.keep) {
    writeKeepEnv(stack);
    say(keepText(stack));
    await new Promise<void>((resolve) => signal.addEventListener('abort', () => resolve()));
    return;
  }
  if (summary.paused) process.exitCode = EXIT.stop;
  else if (!summary.complete) {
    process.exitCode = EXIT.failure;
    say(
      `gave up after ${timeoutS} s with ${summary.records} records not all finished; see ${summary.log_dir}`,
    );
  }
}
