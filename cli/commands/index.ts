import type { Command } from 'commander';
import { CliError, EXIT } from '../exit-codes.js';

type Register = (program: Command) => void;

/**
 * Every sub-command lives in its own file in this folder and exports a `register…` function;
 * this list is the one place that wires them into the program. Each file is imported only
 * when its command is the one being run, so `threadgate status --help` does not load the
 * local stack or the benchmark.
 */
const COMMANDS: Record<string, () => Promise<Register>> = {
  solve: async () => (await import('./solve.js')).registerSolveCommand,
  threads: async () => (await import('./threads.js')).registerThreadsCommand,
  standin: async () => (await import('./standin.js')).registerStandinCommand,
  enqueue: async () => (await import('./enqueue.js')).registerEnqueue,
  status: async () => (await import('./status.js')).registerStatus,
  outcomes: async () => (await import('./outcomes.js')).registerOutcomes,
  wait: async () => (await import('./wait.js')).registerWait,
  pause: async () => (await import('./pause.js')).registerPause,
  resume: async () => (await import('./resume.js')).registerResume,
  cancel: async () => (await import('./cancel.js')).registerCancel,
  redrive: async () => (await import('./redrive.js')).registerRedrive,
  secret: async () => (await import('./secret.js')).registerSecret,
  bench: async () => (await import('./bench.js')).registerBench,
  load: async () => (await import('./load.js')).registerLoad,
  chaos: async () => (await import('./chaos.js')).registerChaos,
  local: async () => (await import('./local.js')).registerLocal,
};

/** Every command's name, in the order of the overall help. */
export const COMMAND_NAMES = Object.keys(COMMANDS);

/**
 * Commands that need a checkout of the repository (the local stack, its stand-ins, the
 * benchmark, the load and chaos runs): the published package leaves them out (package.json
 * `files`; a test checks both lists).
 */
export const DEVELOPMENT_COMMANDS = ['standin', 'bench', 'load', 'chaos', 'local'] as const;

/** A development command in the installed package: registered as a stub that says where it runs. */
function checkoutOnly(name: string): Register {
  return (program) => {
    program
      .command(name)
      .description(`(development command: needs a checkout of the threadgate repository)`)
      .allowUnknownOption()
      .allowExcessArguments()
      .action(() => {
        throw new CliError(
          `\`threadgate ${name}\` is a development command: it runs from a checkout of the threadgate repository (git clone, npm ci, then npx threadgate ${name}); the installed package does not include it`,
          EXIT.usage,
        );
      });
  };
}

async function load(name: string): Promise<Register> {
  try {
    return await (COMMANDS[name] as () => Promise<Register>)();
  } catch (err) {
    const missing = (err as NodeJS.ErrnoException).code === 'ERR_MODULE_NOT_FOUND';
    if (missing && (DEVELOPMENT_COMMANDS as readonly string[]).includes(name)) return checkoutOnly(name);
    throw err;
  }
}

/**
 * Registers the command named in `args` (the user's arguments, without node and the script),
 * or every command when there is none, it is `help`, or it is unknown (the overall help and
 * commander's "did you mean" need them all).
 */
export async function registerCommands(program: Command, args: readonly string[]): Promise<void> {
  const name = commandName(program, args);
  const wanted = name !== undefined && Object.hasOwn(COMMANDS, name) ? [name] : Object.keys(COMMANDS);
  const registers = await Promise.all(wanted.map(load));
  for (const register of registers) register(program);
}

/** The first argument that is neither a program option nor the value of one. */
function commandName(program: Command, args: readonly string[]): string | undefined {
  const takesValue = new Set(
    program.options.filter((o) => o.required || o.optional).flatMap((o) => [o.long, o.short]),
  );
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (!arg.startsWith('-')) return arg;
    if (takesValue.has(arg)) i++;
  }
  return undefined;
}
