import { CliError, EXIT } from './exit-codes.js';

/**
 * Runs a long local command (bench, load) so that the first Ctrl-C or SIGTERM stops it cleanly
 * (the signal aborts; the run stops its local stack) and a second one exits at once (130).
 */
export async function runInterruptible<T>(
  label: string,
  run: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const controller = new AbortController();
  const onSignal = () => {
    if (controller.signal.aborted) process.exit(EXIT.interrupted);
    process.stderr.write(`${label}: interrupted; stopping the local stack (Ctrl-C again to exit now)\n`);
    controller.abort();
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
    return await run(controller.signal);
  } catch (err) {
    if (controller.signal.aborted) throw new CliError('interrupted', EXIT.interrupted);
    throw err;
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}
