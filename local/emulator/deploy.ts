import { spawn } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import {
  appendFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import {
  CreateSecretCommand,
  PutSecretValueCommand,
  ResourceExistsException,
  SecretsManagerClient,
} from '@aws-sdk/client-secrets-manager';
import { DEFAULTS } from '../../functions/common/settings.js';
import { STACK_OUTPUT_KEYS, type StackOutputKey } from '../../infra/outputs.js';
import { MOTO_ACCOUNT, MOTO_REGION } from './moto.js';

/**
 * Deploys the real CDK app (infra/app.ts through cdk.json) to an AWS emulator the way an
 * operator deploys it to AWS: the API-key secret is created outside the stack, then
 * `cdk bootstrap` and `cdk deploy --method=direct` (change-set deploys lose stack outputs in
 * moto, and stack updates fail there: deploy once per fresh server).
 *
 * Synthesis (esbuild bundling of both functions) is the slow part, so the cloud assembly is
 * cached under `.local-stack/assemblies/<hash of sources and settings>` and reused. The one
 * setting that changes from run to run, the CaptchaAI stand-in's URL (an ephemeral port), is
 * synthesized as a placeholder and written into a per-run copy of the template; everything
 * else, the bundles included, is exactly what `cdk synth` produced.
 */
export type StackOutputs = Record<StackOutputKey, string> & Record<string, string>;

export const REQUIRED_OUTPUTS = STACK_OUTPUT_KEYS;

/** Settings as infra/config.ts reads them from CDK context (strings, numbers or lists). */
export type StackSettings = Record<string, string | number | readonly string[] | undefined>;

export interface DeployOptions {
  /** Emulator endpoint, region and credentials (local/emulator/moto.ts awsEnvFor). */
  awsEnv: Record<string, string>;
  /** The CaptchaAI API key stored in the secret (never logged). */
  apiKey: string;
  /** infra/config.ts settings; `captchaaiUrl` may change between runs without a new synth. */
  settings: StackSettings;
  /** Cloud assemblies are cached here. @default <repo>/.local-stack/assemblies */
  cacheDir?: string;
  /** The CDK CLI's output is appended here. @default <repo>/.local-stack/deploy.log */
  logFile?: string;
  /** Synthesize even when a cached assembly exists. @default false */
  freshSynth?: boolean;
  /** The emulator's account id (LocalStack's is 000000000000 for key `test`). @default MOTO_ACCOUNT */
  account?: string;
}

export interface DeployResult {
  outputs: StackOutputs;
  stackName: string;
  /** The per-run copy of the cloud assembly that was deployed (its asset folders hold the bundles). */
  assemblyDir: string;
  timings: { synthMs: number; synthCached: boolean; bootstrapMs: number; deployMs: number; totalMs: number };
}

export class DeployError extends Error {
  override name = 'DeployError';
}

export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
const CDK_CLI = join(REPO_ROOT, 'node_modules', 'aws-cdk', 'bin', 'cdk');
/** Synthesized in place of the CaptchaAI URL and replaced per run (`.invalid` can never resolve). */
export const CAPTCHAAI_URL_PLACEHOLDER = 'http://captchaai-url.threadgate-placeholder.invalid';
const SOURCES = ['infra', 'functions', 'package-lock.json', 'cdk.json', 'tsconfig.json'];

function listFiles(path: string): string[] {
  if (!existsSync(path)) return [];
  if (!statSync(path).isDirectory()) return [path];
  return readdirSync(path, { withFileTypes: true })
    .sort((a, b) => a.name.localeCompare(b.name))
    .flatMap((e) => listFiles(join(path, e.name)));
}

/** Hash of everything synthesis depends on: the settings and the sources it bundles. */
export function assemblyKey(settings: StackSettings): string {
  const hash = createHash('sha256');
  const { captchaaiUrl: _run, ...stable } = settings;
  hash.update(JSON.stringify(Object.entries(stable).sort(([a], [b]) => a.localeCompare(b))));
  for (const file of SOURCES.flatMap((s) => listFiles(join(REPO_ROOT, s)))) {
    hash.update(relative(REPO_ROOT, file));
    hash.update(readFileSync(file));
  }
  return hash.digest('hex').slice(0, 16);
}

function contextArgs(settings: StackSettings): string[] {
  const args: string[] = [];
  for (const [key, value] of Object.entries(settings)) {
    if (value === undefined) continue;
    args.push('-c', `${key}=${Array.isArray(value) ? value.join(',') : String(value)}`);
  }
  return args;
}

function cdkEnv(awsEnv: Record<string, string>, account = MOTO_ACCOUNT): NodeJS.ProcessEnv {
  return {
    ...process.env,
    ...awsEnv,
    CDK_DEFAULT_ACCOUNT: account,
    CDK_DEFAULT_REGION: awsEnv.AWS_REGION ?? MOTO_REGION,
    CDK_DISABLE_CLI_TELEMETRY: 'true',
    AWS_EC2_METADATA_DISABLED: 'true',
    FORCE_COLOR: '0',
    NO_COLOR: '1',
  };
}

/** Runs the CDK CLI, its output appended to `logFile`; a failure carries the output's tail. */
function runCdk(args: string[], env: NodeJS.ProcessEnv, cwd: string, logFile: string): Promise<void> {
  appendFileSync(logFile, `\n$ cdk ${args.join(' ')}\n`);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CDK_CLI, ...args, '--no-notices'], {
      cwd,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let tail = '';
    const onData = (chunk: Buffer) => {
      appendFileSync(logFile, chunk);
      tail = (tail + chunk.toString('utf8')).slice(-3000);
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('error', reject);
    child.on('close', (code) => {
      if (code === 0) resolve();
      else reject(new DeployError(`cdk ${args[0]} failed (exit ${code}); see ${logFile}:\n${tail.trim()}`));
    });
  });
}

/**
 * The cached cloud assembly for these settings, synthesized when missing. Concurrent callers
 * (test files in parallel) wait for one synthesis instead of running their own.
 */
export async function synthesize(options: {
  settings: StackSettings;
  cacheDir?: string;
  logFile: string;
  fresh?: boolean;
}): Promise<{ dir: string; cached: boolean; ms: number }> {
  const started = Date.now();
  const cacheDir = options.cacheDir ?? join(REPO_ROOT, '.local-stack', 'assemblies');
  mkdirSync(cacheDir, { recursive: true });
  const settings = { ...options.settings, captchaaiUrl: CAPTCHAAI_URL_PLACEHOLDER, nag: 'false' };
  const dir = join(cacheDir, assemblyKey(settings));
  const lock = `${dir}.lock`;
  for (;;) {
    if (!options.fresh && existsSync(join(dir, 'manifest.json'))) {
      return { dir, cached: true, ms: Date.now() - started };
    }
    try {
      mkdirSync(lock);
      break;
    } catch {
      // Someone else is synthesizing the same assembly; wait for it (a lock older than 10 min is stale).
      try {
        if (Date.now() - statSync(lock).mtimeMs > 600_000) rmSync(lock, { recursive: true, force: true });
      } catch {
        // The lock just went away.
      }
      await sleep(500);
    }
  }
  const staging = `${dir}.${randomUUID().slice(0, 8)}.tmp`;
  try {
    await runCdk(
      ['synth', '--quiet', '-o', staging, ...contextArgs(settings)],
      cdkEnv({}),
      REPO_ROOT,
      options.logFile,
    );
    rmSync(dir, { recursive: true, force: true });
    renameSync(staging, dir);
  } finally {
    rmSync(staging, { recursive: true, force: true });
    rmSync(lock, { recursive: true, force: true });
  }
  return { dir, cached: false, ms: Date.now() - started };
}

/** A copy of the cached assembly with this run's CaptchaAI URL written into the templates. */
function prepareRunAssembly(cached: string, captchaaiUrl: string): string {
  const runDir = join(tmpdir(), `threadgate-assembly-${randomUUID().slice(0, 8)}`);
  cpSync(cached, runDir, { recursive: true });
  for (const file of readdirSync(runDir).filter((f) => f.endsWith('.template.json'))) {
    const path = join(runDir, file);
    writeFileSync(path, readFileSync(path, 'utf8').split(CAPTCHAAI_URL_PLACEHOLDER).join(captchaaiUrl));
  }
  return runDir;
}

/** Creates the API-key secret, or replaces its value when it exists. */
export async function putApiKeySecret(awsEnv: Record<string, string>, secretName: string, apiKey: string) {
  const client = new SecretsManagerClient(clientConfig(awsEnv));
  try {
    await client.send(new CreateSecretCommand({ Name: secretName, SecretString: apiKey }));
  } catch (err) {
    if (!(err instanceof ResourceExistsException)) throw err;
    await client.send(new PutSecretValueCommand({ SecretId: secretName, SecretString: apiKey }));
  }
}

export function clientConfig(awsEnv: Record<string, string>) {
  return {
    endpoint: awsEnv.AWS_ENDPOINT_URL,
    region: awsEnv.AWS_REGION ?? MOTO_REGION,
    credentials: {
      accessKeyId: awsEnv.AWS_ACCESS_KEY_ID ?? 'testing',
      secretAccessKey: awsEnv.AWS_SECRET_ACCESS_KEY ?? 'testing',
    },
  };
}

/** The stack's outputs (DescribeStacks), checked against the contract's keys. */
export async function readStackOutputs(
  awsEnv: Record<string, string>,
  stackName: string,
): Promise<StackOutputs> {
  const cfn = new CloudFormationClient(clientConfig(awsEnv));
  const out = await cfn.send(new DescribeStacksCommand({ StackName: stackName }));
  const outputs: Record<string, string> = {};
  for (const o of out.Stacks?.[0]?.Outputs ?? []) if (o.OutputKey) outputs[o.OutputKey] = o.OutputValue ?? '';
  const missing = REQUIRED_OUTPUTS.filter((k) => !outputs[k]);
  if (missing.length) {
    throw new DeployError(
      `stack ${stackName} (${out.Stacks?.[0]?.StackStatus ?? 'missing'}) lacks outputs ${missing.join(', ')}; ` +
        'a change-set deploy loses outputs in moto: deploy once, with --method=direct, to a fresh server',
    );
  }
  return outputs as StackOutputs;
}

/** Secret, bootstrap, deploy and outputs, against a fresh emulator. */
export async function deployToEmulator(options: DeployOptions): Promise<DeployResult> {
  const started = Date.now();
  const logFile = options.logFile ?? join(REPO_ROOT, '.local-stack', 'deploy.log');
  mkdirSync(join(logFile, '..'), { recursive: true });
  const stackName = String(options.settings.stackName ?? DEFAULTS.stackName);
  const secretName = String(options.settings.secretName ?? DEFAULTS.secretName);
  const captchaaiUrl = String(options.settings.captchaaiUrl ?? DEFAULTS.captchaaiUrl);
  const account = options.account ?? MOTO_ACCOUNT;
  const env = cdkEnv(options.awsEnv, account);
  const region = options.awsEnv.AWS_REGION ?? MOTO_REGION;

  // Synthesis needs no emulator: run it (or find it cached) while bootstrap runs.
  const synth = synthesize({
    settings: { ...options.settings, stackName },
    cacheDir: options.cacheDir,
    logFile,
    fresh: options.freshSynth,
  });
  const bootstrapStarted = Date.now();
  const emptyDir = join(tmpdir(), `threadgate-bootstrap-${randomUUID().slice(0, 8)}`);
  mkdirSync(emptyDir);
  const bootstrap = Promise.all([
    putApiKeySecret(options.awsEnv, secretName, options.apiKey),
    // From an empty folder, so the CLI does not synthesize the app just to bootstrap.
    runCdk(['bootstrap', `aws://${account}/${region}`], env, emptyDir, logFile),
  ]).then(() => Date.now() - bootstrapStarted);
  let assembly: { dir: string; cached: boolean; ms: number };
  let bootstrapMs: number;
  try {
    [assembly, bootstrapMs] = await Promise.all([synth, bootstrap]);
  } finally {
    rmSync(emptyDir, { recursive: true, force: true });
  }

  const runDir = prepareRunAssembly(assembly.dir, captchaaiUrl);
  const deployStarted = Date.now();
  await runCdk(
    [
      'deploy',
      stackName,
      '--app',
      runDir,
      '--method=direct',
      '--require-approval',
      'never',
      '--progress',
      'events',
    ],
    env,
    runDir,
    logFile,
  );
  const deployMs = Date.now() - deployStarted;
  const outputs = await readStackOutputs(options.awsEnv, stackName);
  return {
    outputs,
    stackName,
    assemblyDir: runDir,
    timings: {
      synthMs: assembly.ms,
      synthCached: assembly.cached,
      bootstrapMs,
      deployMs,
      totalMs: Date.now() - started,
    },
  };
}
