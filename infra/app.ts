import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { App, Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { resolveConfig, settingsFromContext } from './config.js';
import { ThreadgateStack } from './threadgate-stack.js';

/**
 * The CDK app (cdk.json: `npx tsx infra/app.ts`). Every setting comes from CDK context;
 * see infra/config.ts and docs/configuration.md and docs/deploying.md. cdk-nag's AwsSolutions pack checks
 * the synthesized template; `nag=false` in context switches it off (the local stack does
 * not need it).
 */
export function buildApp(app: App = new App()): { app: App; stack: ThreadgateStack } {
  const { stackName } = resolveConfig(settingsFromContext((key) => app.node.tryGetContext(key)));
  const stack = new ThreadgateStack(app, stackName);
  if (String(app.node.tryGetContext('nag') ?? 'true') !== 'false') {
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  }
  return { app, stack };
}

if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  buildApp().app.synth();
}
