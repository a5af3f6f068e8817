import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';

/**
 * Starts moto's server (AWS emulator) through `local/emulator/moto_server.py`, which switches off
 * moto's Docker-based execution of SQS event source mappings. Used by the local stack,
 * the CLI and the tests.
 */
export interface MotoServer {
  /** `http://localhost:PORT` — localhost, not 127.0.0.1: moto only treats template URLs as path-style for localhost. */
  endpoint: string;
  port: number;
  /** Environment for AWS SDK clients and the CDK CLI pointed at this server. */
  awsEnv: Record<string, string>;
  stop(): Promise<void>;
}

export interface StartMotoOptions {
  /** 0 (default) picks a free port. */
  port?: number;
  /** Extra environment for the server, e.g. MOTO_LAMBDA_CONCURRENCY_QUOTA. */
  env?: Record<string, string>;
  python?: string;
}

export const MOTO_REGION = 'us-east-1';
export const MOTO_ACCOUNT = '123456789012';

const LAUNCHER = fileURLToPath(new URL('./moto_server.py', import.meta.url));

export class MotoUnavailableError extends Error {
  override name = 'MotoUnavailableError';
}

/**
 * Makes sure python3 can import moto's server. If it cannot, tries one user-level pip
 * install; if that fails too (no PyPI here, say), throws with the command to run.
 */
export function ensureMoto(python = process.env.THREADGATE_PYTHON ?? 'python3'): void {
  const probe = spawnSync(python, ['-c', 'import moto.moto_server.threaded_moto_server, flask'], {
    encoding: 'utf8',
  });
  if (probe.error) {
    throw new MotoUnavailableError(
      `cannot run ${python} (${probe.error.message}); install Python 3 and then: ${python} -m pip install 'moto[server]>=5,<6'`,
    );
  }
  if (probe.status === 0) return; // already installed
  process.stderr.write(
    `moto's server is not installed for ${python}; trying: pip install --user 'moto[server]>=5,<6'\n`,
  );
  const install = spawnSync(python, ['-m', 'pip', 'install', '--user', '--quiet', 'moto[server]>=5,<6'], {
    encoding: 'utf8',
    timeout: 300_000,
  });
  const again = spawnSync(python, ['-c', 'import moto.moto_server.threaded_moto_server, flask'], {
    encoding: 'utf8',
  });
  if (again.status !== 0) {
    throw new MotoUnavailableError(
      `moto's server is not installed for ${python} and installing it failed` +
        `${install.stderr ? ` (${install.stderr.trim().split('\n').pop()})` : ''}. ` +
        `Install it yourself with: ${python} -m pip install 'moto[server]>=5,<6' ` +
        `(or set THREADGATE_PYTHON to a python3 that has it).`,
    );
  }
}

export function awsEnvFor(endpoint: string): Record<string, string> {
  return {
    AWS_ENDPOINT_URL: endpoint,
    AWS_REGION: MOTO_REGION,
    AWS_DEFAULT_REGION: MOTO_REGION,
    AWS_ACCESS_KEY_ID: 'testing',
    AWS_SECRET_ACCESS_KEY: 'testing',
  };
}

/** moto_server.py's exit code when python3 cannot import moto's server. */
const MOTO_NOT_IMPORTABLE = 3;

/** The launcher could not start because python3 lacks moto's server (or python3 itself is missing). */
class MotoMissing extends Error {}

/**
 * Starts the launcher. The common case (moto installed) costs one Python process: the launcher
 * itself says when moto's server is not importable (exit 3), and only then is `ensureMoto`'s
 * probe and install attempt run, and the launcher started again. (Probing first cost a second
 * Python process importing moto, about 1 s of CPU, at every start.)
 */
export async function startMoto(options: StartMotoOptions = {}): Promise<MotoServer> {
  const python = options.python ?? process.env.THREADGATE_PYTHON ?? 'python3';
  try {
    return await launch(python, options);
  } catch (err) {
    if (!(err instanceof MotoMissing)) throw err;
    ensureMoto(python);
    return launch(python, options);
  }
}

async function launch(python: string, options: StartMotoOptions): Promise<MotoServer> {
  const child: ChildProcess = spawn(python, [LAUNCHER, '--port', String(options.port ?? 0)], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  let stderr = '';
  child.stderr?.setEncoding('utf8');
  child.stderr?.on('data', (chunk: string) => {
    // moto logs every request to stderr; keep only a tail for error messages.
    stderr = (stderr + chunk).slice(-4000);
  });
  const port = await new Promise<number>((resolve, reject) => {
    let out = '';
    const onData = (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const line = out.split('\n').find((l) => l.startsWith('{'));
      if (line) {
        child.stdout?.off('data', onData);
        resolve((JSON.parse(line) as { port: number }).port);
      }
    };
    child.stdout?.on('data', onData);
    child.once('exit', (code) =>
      reject(
        code === MOTO_NOT_IMPORTABLE
          ? new MotoMissing(stderr)
          : new MotoUnavailableError(`moto's server exited (${code}): ${stderr.trim()}`),
      ),
    );
    child.once('error', (err) => reject(new MotoMissing(err.message)));
  });
  child.stdout?.resume();
  const endpoint = `http://localhost:${port}`;
  return {
    endpoint,
    port,
    awsEnv: awsEnvFor(endpoint),
    async stop() {
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      child.stdin?.end();
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}
