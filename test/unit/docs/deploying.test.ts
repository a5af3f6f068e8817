import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';
import { consumerTemplate, type GrantStatement, grantStatements } from '../../../infra/reference.js';

/**
 * docs/deploying.md against the synthesized template: its operator policy for use outside CDK allows exactly what grantOperate grants (each
 * action on each resource, under the same conditions) on a stack with one lane and on one with
 * lanes, whose lane-shape parameter `threadgate status` reads.
 */
const DOC = readFileSync(`${PACKAGE_ROOT}docs/deploying.md`, 'utf8');

/** The policy's placeholders for the resources the reference names by construct path (stack `Consumer`). */
const PLACEHOLDER: Record<string, string> = {
  '<this stack>': 'arn:aws:cloudformation:REGION:ACCOUNT:stack/STACK/*',
  '<Jobs/Queue>': 'QueueArn',
  '<Jobs/Dlq>': 'DlqArn',
  '<OutcomeStream/Failures>': 'OutcomeFailuresQueueArn',
  '<Worker/Worker/Function>': 'arn:aws:lambda:REGION:ACCOUNT:function:STACK-worker',
  '<CapAdjuster/Adjuster/Function>': 'arn:aws:lambda:REGION:ACCOUNT:function:STACK-cap-adjuster',
  '<Worker/Worker/Function mapping>': 'MappingUuid',
  '<PipelineState/Parameter>': '/STACK/pipeline-state',
  '<PipelineState/LaneShape>': '/STACK/lane-shape',
  '<Outcomes/Table>': 'arn:aws:dynamodb:REGION:ACCOUNT:table/TableName',
  '<region>': 'REGION',
  '<account>': 'ACCOUNT',
};

const LANE_SHAPE_ARN = 'arn:aws:ssm:REGION:ACCOUNT:parameter/STACK/lane-shape';

/** Each statement as "action on resource [if conditions]", one per action and resource. */
function pairs(statements: GrantStatement[]): string[] {
  const each = statements.flatMap((s) =>
    s.actions.flatMap((a) =>
      s.resources.map((r) => `${a} on ${r}${s.conditions ? ` if ${JSON.stringify(s.conditions)}` : ''}`),
    ),
  );
  return [...new Set(each)].sort();
}

function documentedPolicy(): GrantStatement[] {
  const block = /```json\n(\{"Version"[\s\S]*?)```/.exec(DOC)?.[1] ?? '{}';
  const policy = JSON.parse(block) as {
    Statement: {
      Action: string | string[];
      Resource: string | string[];
      Condition?: Record<string, unknown>;
    }[];
  };
  return policy.Statement.map((s) => ({
    actions: [s.Action].flat(),
    resources: [s.Resource].flat(),
    ...(s.Condition ? { conditions: s.Condition } : {}),
  }));
}

function granted(lanes: number): GrantStatement[] {
  const placeholders = (r: string) =>
    Object.entries(PLACEHOLDER).reduce((text, [path, placeholder]) => text.replaceAll(path, placeholder), r);
  return grantStatements('grantOperate', lanes).map((s) => ({
    ...s,
    resources: s.resources.map(placeholders),
  }));
}

describe('docs/deploying.md', () => {
  it('names the functions and parameters as a stack names them (its placeholders hold)', () => {
    const names = Object.values(consumerTemplate(16).Resources).flatMap((r) =>
      r.Type === 'AWS::Lambda::Function' || r.Type === 'AWS::SSM::Parameter'
        ? [String(r.Properties.FunctionName ?? r.Properties.Name).replace('Consumer', 'STACK')]
        : [],
    );
    expect(names).toEqual(
      expect.arrayContaining([
        'STACK-worker',
        'STACK-cap-adjuster',
        '/STACK/pipeline-state',
        '/STACK/lane-shape',
      ]),
    );
  }, 240_000);

  it("gives outside CDK the operator policy of a lanes stack: grantOperate's actions on its resources", () => {
    expect(pairs(documentedPolicy())).toEqual(pairs(granted(16)));
  }, 240_000);

  it('gives a one-lane stack the same policy but the lane-shape parameter, which it does not have', () => {
    const documented = pairs(documentedPolicy()).filter((p) => !p.includes(` on ${LANE_SHAPE_ARN}`));
    expect(documented).toEqual(pairs(granted(1)));
  }, 240_000);
});
