import { Command, CommanderError } from 'commander';
import { VERSION } from '../infra/package-root.js';
import { registerCommands } from './commands/index.js';
import { CliError, EXIT, EXIT_AND_ENVIRONMENT_HELP } from './exit-codes.js';

// The CLI supports Node 20 on purpose (package.json engines: operators' machines; the functions
// themselves deploy on Lambda's nodejs22.x); the AWS SDK's notice that later SDK versions will
// want Node 22 would otherwise reach the stderr of every command.
process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';

/**
 * A reader that went away (`threadgate outcomes | head -1`) ends the command quietly with exit
 * code 0, as standard Unix tools do, instead of an unhandled `write EPIPE`. Whatever the
 * command had started (child processes of `local`) watches for its parent going away.
 */
export function endQuietlyOnClosedPipe(stream: NodeJS.WriteStream, exit = () => process.exit(0)): void {
  stream.on('error', (err: NodeJS.ErrnoException) => {
    if (err.code === 'EPIPE') return exit();
    throw err;
  });
}

/**
 * Builds the `threadgate` program for `argv` (as in process.argv): only the command it names is
 * loaded. Exported so tests can drive it without a child process.
 */
export async function buildProgram(argv: readonly string[]): Promise<Command> {
  const program = new Command('threadgate')
    .description(
      'Solve CAPTCHAs for distributed jobs through CaptchaAI without exceeding the plan thread limit.',
    )
    .version(VERSION)
    .option(
      '--profile <name>',
      'AWS profile for credentials, region and endpoint_url (default: $AWS_PROFILE)',
    )
    .showHelpAfterError('(run with --help for usage)')
    .addHelpText('after', EXIT_AND_ENVIRONMENT_HELP)
    .exitOverride()
    // Through AWS_PROFILE, the one setting every part of the SDK reads: credentials, region and
    // the configured endpoint (the client option `profile` does not reach endpoint_url).
    .hook('preAction', () => {
      const { profile } = program.opts<{ profile?: string }>();
      if (profile) process.env.AWS_PROFILE = profile;
    });
  await registerCommands(program, argv.slice(2));
  return program;
}

export async function main(argv: string[]): Promise<void> {
  endQuietlyOnClosedPipe(process.stdout);
  // Nothing sensible can be said once stderr is gone: stop quietly too.
  endQuietlyOnClosedPipe(process.stderr);
  try {
    const program = await buildProgram(argv);
    await program.parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end up here with exit code 0; everything else commander refuses
      // (unknown command or option, missing argument) is a usage error.
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
