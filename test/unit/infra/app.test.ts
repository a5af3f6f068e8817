import { readFileSync } from 'node:fs';
import { App } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import { describe, expect, it } from 'vitest';
import { buildApp } from '../../../infra/app.js';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';

/**
 * The CDK app as `cdk synth` runs it from cdk.json (`npm run synth`): cdk.json's context and
 * nothing else, so every setting at its default, and cdk-nag's AwsSolutions pack on unless
 * `nag=false`. The functions' bundling is skipped here; every deploy of the local stack runs
 * `cdk synth` of this app through cdk.json with the bundling (local/emulator/deploy.ts).
 */
const CDK_JSON_CONTEXT = JSON.parse(readFileSync(`${PACKAGE_ROOT}cdk.json`, 'utf8')).context as Record<
  string,
  unknown
>;

function app(context: Record<string, unknown> = {}): App {
  return new App({ context: { ...CDK_JSON_CONTEXT, ...context, 'aws:cdk:bundling-stacks': [] } });
}

describe('infra/app.ts', () => {
  it('synthesizes the stack at the default settings with cdk-nag finding nothing unacknowledged', () => {
    // Act
    const { app: synthesized, stack } = buildApp(app());
    const assembly = synthesized.synth();
    // Assess
    expect(stack.stackName).toBe('Threadgate');
    expect(assembly.getStackByName(stack.stackName).template.Resources).toBeDefined();
  });

  it('runs cdk-nag on the app: a finding fails the synth, and nag=false switches it off', () => {
    // Prepare: the same wildcard grant, unacknowledged, in an app with nag and one without.
    const withNag = buildApp(app());
    const withoutNag = buildApp(app({ nag: 'false' }));
    for (const { stack } of [withNag, withoutNag]) {
      stack.worker.role.addToPrincipalPolicy(
        new iam.PolicyStatement({ actions: ['s3:GetObject'], resources: ['*'] }),
      );
    }
    // Act / Assess
    expect(() => withNag.app.synth()).toThrow(/AwsSolutions-IAM5\[Resource::\*\]/);
    expect(() => withoutNag.app.synth()).not.toThrow();
  });
});
