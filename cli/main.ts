import { Command, CommanderError } from 'commander';
import { registerCommands } from './commands/index.js';
import { CliError, EXIT } from './exit-codes.js';

/** Builds the `threadgate` program; exported so tests can drive it without a child process. */
export function buildProgram(): Command {
  const program = new Command('threadgate')
    .description(
      'Solve CAPTCHAs for distributed jobs through CaptchaAI without exceeding the plan thread limit.',
    )
    .version('0.1.0')
    .showHelpAfterError('(run with --help for usage)')
    .exitOverride();
  registerCommands(program);
  return program;
}

export async function main(argv: string[]): Promise<void> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end up here with exit code 0.
      process.exitCode = err.exitCode === 0 ? 0 : EXIT.usage;
      return;
    }
    if (err instanceof CliError) {
      process.stderr.write(`threadgate: ${err.message}\n`);
      process.exitCode = err.exitCode;
      return;
    }
    process.stderr.write(`threadgate: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exitCode = 1;
  }
}
