import { Stack, type StackProps } from 'aws-cdk-lib';
import type { Construct } from 'constructs';
import {
  resolveConfig,
  settingsFromContext,
  type ThreadgateConfig,
  type ThreadgateSettings,
} from './config.js';
import type { Worker } from './constructs/worker.js';
import { VERSION } from './package-root.js';
import { Threadgate, type ThreadgateProps } from './threadgate.js';

export interface ThreadgateStackProps extends StackProps {
  /** Settings that override CDK context (see infra/config.ts for every setting and its default). */
  readonly settings?: ThreadgateSettings;
}

/**
 * This repository's stack (cdk.json's app, the local stack, the e2e suite): one Threadgate
 * construct whose settings come from CDK context, `settings` winning. The construct's id
 * is `Default`, so its resources keep the logical ids they had when the stack built them itself.
 * Output keys are a contract (docs/design.md "Stack outputs"): the CLI and the local runtime read them.
 */
export class ThreadgateStack extends Stack {
  readonly config: ThreadgateConfig;
  readonly gate: Threadgate;
  readonly worker: Worker;

  constructor(scope: Construct, id: string, props: ThreadgateStackProps = {}) {
    const settings: ThreadgateSettings = {
      ...settingsFromContext((key) => scope.node.tryGetContext(key)),
      stackName: props.stackName ?? id,
      ...props.settings,
    };
    // Validated here too, so a bad stack name is reported as the setting before CDK's own check.
    const { stackName } = resolveConfig(settings);
    super(scope, id, { ...props, stackName });
    this.templateOptions.description = stackDescription();
    const { stackName: _name, ...rest } = settings;
    // Context values are strings or JSON; resolveConfig reads both, so they pass through as they are.
    this.gate = new Threadgate(this, 'Default', rest as ThreadgateProps);
    this.config = this.gate.config;
    this.worker = this.gate.parts.worker;
  }
}

/** The stack's description, naming the package version (the same in package.json and python/). */
export function stackDescription(version = VERSION): string {
  return `threadgate ${version}: CAPTCHA-protected form submissions through CaptchaAI, capped at plan threads minus a reserve`;
}
