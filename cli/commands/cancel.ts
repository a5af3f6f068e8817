import type { Command } from 'commander';
import { BatchCancels } from '../../functions/records/cancellations.js';
import { BatchId } from '../../functions/records/job-schema.js';
import { cancelRefreshMs } from '../../functions/worker/cancel-watch.js';
import { CliError, EXIT } from '../exit-codes.js';
import {
  type AwsContext,
  addStackOptions,
  output,
  type StackOptions,
  type ThreadgateStack,
  withStack,
  workerEnvironment,
} from '../stack.js';

interface CancelOptions extends StackOptions {
  batch?: string;
  reason?: string;
  json?: boolean;
}

/**
 * `threadgate cancel --batch ID`: records the batch's cancel in the outcomes table
 * (functions/records/cancellations.ts); every worker environment sees it within the bound
 * (functions/worker/cancel-watch.ts) and ends the batch's records `cancelled`. Other batches
 * and the pipeline go on.
 */
export function registerCancel(program: Command): void {
  addStackOptions(
    program
      .command('cancel')
      .description(
        'Cancel one batch: its records not yet solved end `cancelled` without a task or a POST; other batches go on',
      ),
  )
    .option('--batch <id>', 'the batch_id to cancel (required)')
    .option('--reason <text>', 'why; kept on the cancel and in each cancelled row’s reason')
    .option('--json', 'print the recorded cancel as JSON')
    .addHelpText(
      'after',
      '\nExample:\n  $ threadgate cancel --batch nightly-7 --reason "wrong form URL"\n' +
        'Records of the batch claimed after the bound (10 s × the time scale, at least 1 s) never reach\n' +
        'CaptchaAI; a record whose task is already at CaptchaAI keeps its slot until the task ends and is\n' +
        'not posted (its solve is wasted); a record already posted ends as it would have. Queued messages\n' +
        'of the batch end `cancelled` as the worker reaches them, without a task or a page load. While a\n' +
        'worker cannot read the cancel, it sends nothing to CaptchaAI or the form and tries the record later.\n' +
        'A cancel is final, and so is each `cancelled` row: a message with the same record_key ends\n' +
        'ALREADY_FINISHED (deleted, nothing done), under any batch_id. To send cancelled records again, give\n' +
        'them new record_keys under a new batch_id; list them with\n' +
        '  $ threadgate outcomes --batch nightly-7 --status cancelled\n' +
        'A record follows the batch of its first row: sent again under another batch while it is not\n' +
        'final, it is held (or not) by its first batch’s cancel.\n',
    )
    .action(async (options: CancelOptions) => {
      if (options.batch === undefined)
        throw new CliError('pass --batch ID (the batch_id to cancel)', EXIT.usage);
      const batch = BatchId.safeParse(options.batch);
      if (!batch.success) {
        throw new CliError(
          `--batch: ${batch.error.issues[0]?.message ?? 'not a batch_id'} (a batch_id is 1-256 printable ASCII characters without spaces)`,
          EXIT.usage,
        );
      }
      await withStack(options, async (aws, stack) => {
        const cancels = new BatchCancels({
          client: aws.clients.dynamodb,
          tableName: output(stack, 'TableName'),
        });
        const { cancel, already } = await cancels.cancel(batch.data, {
          ...(options.reason === undefined ? {} : { reason: options.reason }),
          by: 'operator',
        });
        const boundS = await propagationBoundSeconds(aws, stack);
        if (options.json) {
          process.stdout.write(
            `${JSON.stringify({ stack: stack.name, ...cancel, already, propagation_bound_s: boundS }, null, 2)}\n`,
          );
          return;
        }
        const why = cancel.reason ? `; reason: ${cancel.reason}` : '';
        process.stdout.write(
          already
            ? `batch ${cancel.batchId} was already cancelled at ${cancel.cancelledAt} by ${cancel.by ?? '?'}${why}; nothing changed (a cancel is final).\n`
            : `cancelled batch ${cancel.batchId} on ${stack.name} at ${cancel.cancelledAt}${why}.\n` +
                `Every worker sees it within ${boundS} s. Its records end \`cancelled\`; records already posted end as they would have.\n` +
                `\`threadgate wait --batch ${cancel.batchId} …\` ends with exit code ${EXIT.cancelled} once none of its records is in progress.\n`,
        );
      });
    });
}

/** The bound at the deployed worker's time scale (1 when it cannot be read). */
export async function propagationBoundSeconds(aws: AwsContext, stack: ThreadgateStack): Promise<number> {
  let timeScale = 1;
  try {
    const env = await workerEnvironment(aws, stack);
    const scale = Number(env.TIME_SCALE);
    if (Number.isFinite(scale) && scale > 0) timeScale = scale;
  } catch {
    // Reading the worker's configuration is a nicety here; the cancel is recorded already.
  }
  return cancelRefreshMs(timeScale) / 1000;
}
