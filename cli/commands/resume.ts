import type { Command } from 'commander';
import { StopClassError } from '../../functions/common/errors.js';
import { CliError, EXIT } from '../exit-codes.js';
import { addStackOptions, captchaAiAccess, pipelineControl, type StackOptions, withStack } from '../stack.js';

interface ResumeOptions extends StackOptions {
  force?: boolean;
  json?: boolean;
}

/**
 * `threadgate resume`: enable the mapping again. It first asks CaptchaAI's threadsinfo with the
 * stored key, and refuses while the answer is still stop-class (bad key, IP ban, no active
 * plan): resuming then would only send every queued record into the same wall.
 */
export function registerResume(program: Command): void {
  addStackOptions(
    program
      .command('resume')
      .description(
        'Enable the worker mapping again, after checking that CaptchaAI no longer answers stop-class',
      ),
  )
    .option('--force', 'resume even if CaptchaAI still answers stop-class or cannot be checked')
    .option('--json', 'print the recorded pipeline state as JSON')
    .addHelpText(
      'after',
      '\nExamples:\n  $ threadgate resume\n  $ threadgate resume --force   # skip the CaptchaAI check\n',
    )
    .action(async (options: ResumeOptions) => {
      await withStack(options, async (aws, stack) => {
        const control = pipelineControl(aws, stack);
        const [before, mappingBefore] = await Promise.all([control.readState(), control.readMapping()]);
        if (!before.paused && mappingBefore.enabled) {
          if (options.json) {
            process.stdout.write(
              `${JSON.stringify({ stack: stack.name, ...before, mapping: { uuid: mappingBefore.uuid, state: mappingBefore.state } }, null, 2)}\n`,
            );
          } else
            process.stdout.write(
              `${stack.name} is not paused (mapping ${mappingBefore.state}); nothing to resume\n`,
            );
          return;
        }
        let plan: { threads: number; workingThreads: number } | undefined;
        if (!options.force) {
          const access = await captchaAiAccess(aws, stack);
          const client = await access.client();
          try {
            plan = await client.threadsInfo();
          } catch (err) {
            if (err instanceof StopClassError) {
              throw new CliError(
                `not resuming: ${err.message} (threadsinfo at ${access.baseUrl}). ` +
                  'Fix the cause first (a new key: `threadgate secret set`; an IP ban lifts after about 5 minutes), ' +
                  'then run `threadgate resume` again, or resume anyway with --force.',
                EXIT.stop,
                { cause: err },
              );
            }
            throw new CliError(
              `not resuming: could not check CaptchaAI at ${access.baseUrl} (${(err as Error).message}). ` +
                'Try again in a minute, or resume without the check with --force.',
              EXIT.transient,
              { cause: err },
            );
          }
          if (plan.threads <= 0) {
            throw new CliError(
              `not resuming: CaptchaAI (${access.baseUrl}) reports 0 plan threads, i.e. no active plan. ` +
                'Renew the plan, then run `threadgate resume` again, or resume anyway with --force.',
              EXIT.stop,
            );
          }
        }
        const state = await control.resume(
          'operator',
          options.force ? 'resumed by operator (forced)' : undefined,
        );
        const mapping = await control.readMapping();
        if (options.json) {
          process.stdout.write(
            `${JSON.stringify(
              { stack: stack.name, ...state, mapping: { uuid: mapping.uuid, state: mapping.state }, plan },
              null,
              2,
            )}\n`,
          );
          return;
        }
        const planLine = plan
          ? ` CaptchaAI plan: ${plan.threads} threads, ${plan.workingThreads} working.`
          : '';
        process.stdout.write(
          `resumed ${stack.name}: mapping ${mapping.uuid} is ${mapping.state}.${planLine}\n`,
        );
      });
    });
}
