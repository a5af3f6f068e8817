import type { Command } from 'commander';
import { addStackOptions, pipelineControl, type StackOptions, withStack } from '../stack.js';

interface PauseOptions extends StackOptions {
  reason: string;
  json?: boolean;
}

/** `threadgate pause`: disable the worker's mapping (messages wait in the queue) and record why. */
export function registerPause(program: Command): void {
  addStackOptions(
    program
      .command('pause')
      .description(
        'Stop new work: disable the worker mapping (queued messages wait, receive counts untouched) and record the reason',
      ),
  )
    .option('--reason <text>', 'why, shown by `threadgate status`', 'paused by operator')
    .option('--json', 'print the recorded pipeline state as JSON')
    .addHelpText(
      'after',
      '\nExample:\n  $ threadgate pause --reason "partner portal maintenance until 14:00 UTC"\n' +
        '  Invocations already running finish; resume with `threadgate resume`.\n',
    )
    .action(async (options: PauseOptions) => {
      await withStack(options, async (aws, stack) => {
        const control = pipelineControl(aws, stack);
        // One reason is recorded; a pause over a pause replaces it, and says so.
        const before = await control.readState();
        const replaced = before.paused ? before : undefined;
        const state = await control.pause(options.reason, 'operator');
        const mapping = await control.readMapping();
        if (options.json) {
          process.stdout.write(
            `${JSON.stringify({ stack: stack.name, ...state, mapping: { uuid: mapping.uuid, state: mapping.state }, ...(replaced ? { replaced } : {}) }, null, 2)}\n`,
          );
          return;
        }
        process.stdout.write(
          `paused ${stack.name}: mapping ${mapping.uuid} is ${mapping.state}; reason: ${state.reason}\n` +
            (replaced
              ? `It was already paused; this reason replaces the earlier one: "${replaced.reason ?? ''}" (by ${replaced.by ?? '?'}${replaced.since ? ` since ${replaced.since}` : ''}).\n`
              : '') +
            'Queued messages wait untouched; invocations already running finish. Resume with `npx threadgate resume`.\n',
        );
      });
    });
}
