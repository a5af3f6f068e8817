import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { PACKAGE_ROOT } from '../../../infra/package-root.js';
import { alarmRows, grantStatements } from '../../../infra/reference.js';

/**
 * docs/deploying.md against the synthesized template: its alarm runbook has one row per alarm,
 * and its operator policy for use outside CDK allows exactly the actions grantOperate grants.
 */
const DOC = readFileSync(`${PACKAGE_ROOT}docs/deploying.md`, 'utf8');

describe('docs/deploying.md', () => {
  it('has a runbook row for every alarm and none for an alarm that does not exist', () => {
    const runbook = DOC.slice(DOC.indexOf('## Alarms'), DOC.indexOf('## Troubleshooting'));
    const rows = [...runbook.matchAll(/^\| `<stack>-([a-z-]+)` \|/gm)].map((m) => m[1]);
    expect(rows.sort()).toEqual(
      alarmRows()
        .map((a) => a.name.replace('<name>-', ''))
        .sort(),
    );
  }, 240_000);

  it("gives outside CDK the operator policy with exactly grantOperate's actions", () => {
    const block = /```json\n(\{"Version"[\s\S]*?)```/.exec(DOC)?.[1] ?? '{}';
    const policy = JSON.parse(block) as { Statement: { Action: string | string[] }[] };
    const documented = new Set(policy.Statement.flatMap((s) => [s.Action].flat()));
    const granted = new Set(grantStatements('grantOperate').flatMap((s) => s.actions));
    expect([...documented].sort()).toEqual([...granted].sort());
  }, 240_000);
});
