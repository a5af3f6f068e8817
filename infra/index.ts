/**
 * `threadgate/cdk`: the construct and what its props and members use. Everything else in the
 * package is private.
 */
export type { CaptchaType } from '../functions/captchaai/types.js';
export type { ThreadgateConfig } from './config.js';
// The types of `Threadgate.parts`, so a consumer can name them.
export type { CapAdjuster } from './constructs/cap-adjuster.js';
export type { JobQueues } from './constructs/job-queues.js';
export type { Monitoring, OutcomeStreamAlarms } from './constructs/monitoring.js';
export type { OutcomeStream } from './constructs/outcome-stream.js';
export type { OutcomesTable } from './constructs/outcomes-table.js';
export type { SlotLedgerTable } from './constructs/slot-ledger-table.js';
export type { SolveTimesTable } from './constructs/solve-times-table.js';
export type { Worker } from './constructs/worker.js';
export { type OptionalStackOutputKey, STACK_OUTPUT_KEYS, type StackOutputKey } from './outputs.js';
export { VERSION } from './package-root.js';
export { type PerCaptchaTypeMs, Threadgate, type ThreadgateProps } from './threadgate.js';
export { stackDescription, ThreadgateStack, type ThreadgateStackProps } from './threadgate-stack.js';
