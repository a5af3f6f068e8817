import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';
import { consumerTemplate, type GrantStatement, grantStatements } from '../../../infra/reference.js';

/**
 * docs/deploying.md against the synthesized template: its operator policy for use outside CDK allows exactly what grantOperate grants (each
 * action on each resource, under the same conditions) on a stack with one lane and on one with
 * lanes: the same policy, the state item holding the lane shape beside the state.
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
  '<SlotLedger/Table>': 'arn:aws:dynamodb:REGION:ACCOUNT:table/LedgerTableName',
  '<Outcomes/Table>': 'arn:aws:dynamodb:REGION:ACCOUNT:table/TableName',
  '<region>': 'REGION',
  '<account>': 'ACCOUNT',
};

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
  it('names the functions as a stack names them (its placeholders hold), and no SSM parameter', () => {
    const resources = Object.values(consumerTemplate(16).Resources);
    const names = resources.flatMap((r) =>
      r.Type === 'AWS::Lambda::Function'
        ? [String(r.Properties.FunctionName).replace('Consumer', 'STACK')]
        : [],
    );
    expect(names).toEqual(expect.arrayContaining(['STACK-worker', 'STACK-cap-adjuster']));
    expect(resources.filter((r) => r.Type.startsWith('AWS::SSM::'))).toEqual([]);
  }, 240_000);

  it.each([16, 1])(
    "gives outside CDK the operator policy of a stack with lanes %i: grantOperate's actions on its resources",
    (lanes) => {
      expect(pairs(documentedPolicy())).toEqual(pairs(granted(lanes)));
    },
    240_000,
  );
});
