import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { alarmRows, RUNBOOK_PATH, runbookAnchor } from '../../../infra/reference.js';

/**
 * docs/operating.md against the synthesized template: its Alarms section has one section per
 * alarm of a default deployment, under the anchor the construct reference's alarm table links to.
 */
const DOC = readFileSync(RUNBOOK_PATH, 'utf8');

describe('docs/operating.md', () => {
  it('has a section for every alarm and none for an alarm that does not exist', () => {
    const runbook = DOC.slice(DOC.indexOf('## Alarms'), DOC.indexOf('## Everyday tasks'));
    const sections = [...runbook.matchAll(/^### `<stack>-([a-z-]+)`$/gm)].map((m) => `stack-${m[1]}`);
    expect(sections.sort()).toEqual(
      alarmRows()
        .map((a) => runbookAnchor(a.name))
        .sort(),
    );
  }, 240_000);
});
