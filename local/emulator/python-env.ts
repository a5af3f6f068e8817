import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * Which Python runs moto's server (local/emulator/moto.ts), and making one that can. In order:
 * THREADGATE_PYTHON, used as it is; the project's own virtual environment once it holds moto;
 * the machine's python3 when it imports moto's server (no install, as before); otherwise a
 * virtual environment made with `python3 -m venv` in .local-stack/python, which gets
 * `moto[server]` 5.x from the package index. A virtual environment is what PEP 668 allows where
 * `pip install --user` is refused (Debian 12, Ubuntu 24.04, Homebrew's Python). Where nothing can
 * be installed, one message names the command to run and THREADGATE_PYTHON.
 */
export const MOTO_REQUIREMENT = 'moto[server]>=5,<6';
export const PYTHON_VARIABLE = 'THREADGATE_PYTHON';
/** The project's own virtual environment (.local-stack/ is git-ignored and left out of the checks). */
export const PROJECT_VENV = join(fileURLToPath(new URL('../../', import.meta.url)), '.local-stack', 'python');
/** Written into the virtual environment once moto's server imports there. */
const READY_MARK = 'threadgate-moto-ready';
/** What moto's launcher and zygote import. */
const PROBE = 'import moto.moto_server.threaded_moto_server, flask';

export interface MotoPythonOptions {
  /** A Python used as it is, never installed into (THREADGATE_PYTHON, or a test's). */
  fixed?: string;
  /** The Python that is probed first and makes the virtual environment. @default python3 */
  base?: string;
  /** @default PROJECT_VENV */
  venv?: string;
}

/** The interpreter of the virtual environment at `venv`. */
export function venvPython(venv: string): string {
  return process.platform === 'win32' ? join(venv, 'Scripts', 'python.exe') : join(venv, 'bin', 'python');
}

/**
 * The Python to try first, without starting one: THREADGATE_PYTHON, else the project's virtual
 * environment once it holds moto, else python3. If it cannot import moto's server, `ensureMoto`
 * finds or makes one that can.
 */
export function motoPython(options: MotoPythonOptions = {}): string {
  const fixed = options.fixed ?? process.env[PYTHON_VARIABLE];
  if (fixed) return fixed;
  const venv = options.venv ?? PROJECT_VENV;
  return existsSync(join(venv, READY_MARK)) ? venvPython(venv) : (options.base ?? 'python3');
}

function imports(python: string): { ok: boolean; error?: Error } {
  const probe = spawnSync(python, ['-c', PROBE], { encoding: 'utf8' });
  return { ok: probe.status === 0, error: probe.error };
}

/** The last line a failed command wrote, for the message. */
function lastLine(out: string | undefined): string {
  return out?.trim().split('\n').pop() ?? '';
}

/** A path as the user typed it in the checkout: relative when it is inside the working directory. */
function shown(path: string): string {
  const rel = relative(process.cwd(), path);
  return rel && !rel.startsWith('..') ? rel : path;
}

/** No Python that can run moto's server: the message says what to run. */
export class MotoUnavailableError extends Error {
  override name = 'MotoUnavailableError';
}

/**
 * A Python that imports moto's server: the one `motoPython` names, or the project's virtual
 * environment, made and given moto here. Throws a MotoUnavailableError whose message names the one
 * command to run (and THREADGATE_PYTHON) when none can be had.
 */
export function ensureMoto(options: MotoPythonOptions = {}): string {
  const fixed = options.fixed ?? process.env[PYTHON_VARIABLE];
  const alternative = `or set ${PYTHON_VARIABLE} to a python3 that can import moto's server (${MOTO_REQUIREMENT})`;
  if (fixed) {
    const probe = imports(fixed);
    if (probe.ok) return fixed;
    throw new MotoUnavailableError(
      `${PYTHON_VARIABLE}=${fixed} ${probe.error ? `cannot be run (${probe.error.message})` : "cannot import moto's server"}: run \`${fixed} -m pip install '${MOTO_REQUIREMENT}'\`, ${alternative}, or unset it to let threadgate make its own virtual environment`,
    );
  }
  const base = options.base ?? 'python3';
  const venv = options.venv ?? PROJECT_VENV;
  const own = venvPython(venv);
  if (existsSync(join(venv, READY_MARK)) && imports(own).ok) return own;
  const machine = imports(base);
  if (machine.ok) return base;
  if (machine.error) {
    throw new MotoUnavailableError(
      `the local stack runs moto's server on Python 3, and ${base} cannot be run (${machine.error.message}): install Python 3.9 or later, ${alternative}`,
    );
  }
  const command = `${shown(own)} -m pip install '${MOTO_REQUIREMENT}'`;
  if (!existsSync(own)) {
    process.stderr.write(
      `moto's server is not importable by ${base}; making the project's virtual environment: ${base} -m venv ${shown(venv)}\n`,
    );
    const made = spawnSync(base, ['-m', 'venv', venv], { encoding: 'utf8', timeout: 120_000 });
    if (made.status !== 0 || !existsSync(own)) {
      throw new MotoUnavailableError(
        `moto's server is not importable by ${base}, and \`${base} -m venv ${shown(venv)}\` failed (${lastLine(made.stderr || made.stdout) || made.error?.message}): install Python's venv module (Debian and Ubuntu: apt install python3-venv) and run \`${base} -m venv ${shown(venv)} && ${command}\`, ${alternative}`,
      );
    }
  }
  process.stderr.write(`installing ${MOTO_REQUIREMENT} into ${shown(venv)} (once; about a minute)\n`);
  const install = spawnSync(own, ['-m', 'pip', 'install', '--quiet', MOTO_REQUIREMENT], {
    encoding: 'utf8',
    timeout: 600_000,
  });
  if (imports(own).ok) {
    writeFileSync(join(venv, READY_MARK), `${MOTO_REQUIREMENT}\n`);
    return own;
  }
  throw new MotoUnavailableError(
    `moto's server is not importable by ${base}, and installing it into the project's virtual environment ${shown(venv)} failed (pip: ${lastLine(install.stderr) || install.error?.message || `exit ${install.status}`}): run \`${command}\` where a package index has moto, ${alternative}`,
  );
}
