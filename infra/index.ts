/**
 * `threadgate/cdk`: the construct and what its props and members use. Everything else in the
 * package is private.
 */
export type { CaptchaType } from '../functions/captchaai/types.js';
export type { ThreadgateConfig } from './config.js';
export { type OptionalStackOutputKey, STACK_OUTPUT_KEYS, type StackOutputKey } from './outputs.js';
export { VERSION } from './package-root.js';
export { type PerCaptchaTypeMs, Threadgate, type ThreadgateProps } from './threadgate.js';
export { stackDescription, ThreadgateStack, type ThreadgateStackProps } from './threadgate-stack.js';
