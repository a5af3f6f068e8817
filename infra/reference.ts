import { readFileSync, realpathSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { App, Stack } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import ts from 'typescript';
import { OUTCOME_STATUSES } from '../functions/records/fields.js';
import { PACKAGE_ROOT } from './package-root.js';
import { Threadgate } from './threadgate.js';

/**
 * docs/construct.md: the Threadgate construct's props, members, grants and alarms, generated
 * from the code (`npm run docs:construct` writes it; a unit test fails when it differs). Props
 * and members come from the TSDoc of infra/props.ts and infra/threadgate.ts; each grant's actions and resources from
 * the policy a synthesized consumer stack gives a role; the alarms from the synthesized
 * template (infra/constructs/monitoring.ts). Not part of the package (tsconfig.build.json).
 */
export const CONSTRUCT_REFERENCE_PATH = `${PACKAGE_ROOT}docs/construct.md`;
const SOURCE_PATH = `${PACKAGE_ROOT}infra/threadgate.ts`;
/** ThreadgateProps lives beside the construct, in a file of its own. */
const PROPS_PATH = `${PACKAGE_ROOT}infra/props.ts`;

type Json = unknown;
type Resource = { Type: string; Properties: Record<string, Json> };

/** The TSDoc of one declaration: its text, its "Valid range:" sentence and its @default. */
export interface Doc {
  name: string;
  type: string;
  text: string;
  range: string;
  default: string;
}

function docOf(node: ts.Node, name: string, type: string): Doc {
  const jsDoc = (node as { jsDoc?: ts.JSDoc[] }).jsDoc?.at(-1);
  const comment = (ts.getTextOfJSDocComment(jsDoc?.comment) ?? '')
    .replace(/\{@link ([^}]+)\}/g, '`$1`')
    .replace(/\s+/g, ' ')
    .trim();
  const tag = jsDoc?.tags?.find((t) => t.tagName.text === 'default');
  const range = /Valid range: ([\s\S]*?\.)(?: |$)/.exec(comment)?.[1] ?? '';
  return {
    name,
    type: type.replace(/\s+/g, ' '),
    text: comment.replace(`Valid range: ${range}`, '').trim(),
    range: range.replace(/\.$/, ''),
    default: (ts.getTextOfJSDocComment(tag?.comment) ?? '').replace(/\s+/g, ' ').trim(),
  };
}

function parseSource(path = SOURCE_PATH): ts.SourceFile {
  return ts.createSourceFile(path, readFileSync(path, 'utf8'), ts.ScriptTarget.Latest, true);
}

/** ThreadgateProps' members, in source order. */
export function propDocs(source = parseSource(PROPS_PATH)): Doc[] {
  const props = source.statements.find(
    (s): s is ts.InterfaceDeclaration => ts.isInterfaceDeclaration(s) && s.name.text === 'ThreadgateProps',
  );
  return (props?.members ?? [])
    .flatMap((m) => (ts.isPropertySignature(m) ? [m] : []))
    .map((m) => docOf(m, m.name.getText(source), m.type?.getText(source) ?? ''));
}

function threadgateClass(source: ts.SourceFile): ts.ClassDeclaration | undefined {
  return source.statements.find(
    (s): s is ts.ClassDeclaration => ts.isClassDeclaration(s) && s.name?.text === Threadgate.name,
  );
}

const isPrivate = (m: ts.ClassElement) =>
  ts.getCombinedModifierFlags(m as ts.Declaration) & (ts.ModifierFlags.Private | ts.ModifierFlags.Protected);

/** Threadgate's public readonly members (the fields of `parts` as `parts.<field>`). */
export function memberDocs(source = parseSource()): Doc[] {
  const members = threadgateClass(source)?.members ?? [];
  return members
    .flatMap((m) => (ts.isPropertyDeclaration(m) && !isPrivate(m) ? [m] : []))
    .flatMap((m) => {
      const name = m.name.getText(source);
      const own = docOf(m, name, m.type?.getText(source) ?? '');
      if (!m.type || !ts.isTypeLiteralNode(m.type)) return [own];
      const fields = m.type.members
        .flatMap((f) => (ts.isPropertySignature(f) ? [f] : []))
        .map((f) => docOf(f, `${name}.${f.name.getText(source)}`, f.type?.getText(source) ?? ''));
      return [{ ...own, type: 'object' }, ...fields];
    });
}

/** Threadgate's public grant methods: name and TSDoc. */
export function grantDocs(source = parseSource()): Doc[] {
  const members = threadgateClass(source)?.members ?? [];
  return members
    .flatMap((m) =>
      ts.isMethodDeclaration(m) && !isPrivate(m) && m.name.getText(source).startsWith('grant') ? [m] : [],
    )
    .map((m) => docOf(m, m.name.getText(source), 'iam.Grant'));
}

/** Where a grant's statements are read from: one role per grant method in a consumer's stack. */
const granteeId = (method: string) => `Grantee-${method}`;

/**
 * A consumer's stack: a Threadgate with default props but `lanes` whose alarms notify a topic,
 * and one role per grant method given that grant alone (bundling skipped: only the template is
 * read). Built once per lanes value; the generated page reads the default (one lane).
 */
const synthesized = (() => {
  const built = new Map<number, { stack: Stack; template: { Resources: Record<string, Resource> } }>();
  return (lanes = 1) => {
    const cached = built.get(lanes);
    if (cached) return cached;
    const app = new App({ context: { 'aws:cdk:bundling-stacks': [] } });
    const stack = new Stack(app, 'Consumer');
    const gate = new Threadgate(stack, 'Gate', {
      allowedHosts: ['forms.example.com'],
      alarmTopicArn: 'arn:aws:sns:eu-west-1:123456789012:ops',
      ...(lanes === 1 ? {} : { lanes }),
    });
    for (const { name } of grantDocs()) {
      const role = new iam.Role(stack, granteeId(name), { assumedBy: new iam.AccountRootPrincipal() });
      (gate as unknown as Record<string, (g: iam.IGrantable) => iam.Grant>)[name]?.call(gate, role);
    }
    const result = {
      stack,
      template: Template.fromStack(stack).toJSON() as { Resources: Record<string, Resource> },
    };
    built.set(lanes, result);
    return result;
  };
})();

/** The template of that consumer's stack (`Consumer`) with `lanes` lanes. */
export function consumerTemplate(lanes = 1): { Resources: Record<string, Resource> } {
  return synthesized(lanes).template;
}

/** A resource of the template, named by its construct path below the Threadgate (`Jobs/Queue`). */
function namer(stack: Stack): (logicalId: string) => string {
  const paths = new Map<string, string>();
  for (const node of stack.node.findAll()) {
    const cfn = node.node.defaultChild ?? node;
    if (cfn instanceof Object && 'logicalId' in cfn) {
      paths.set(stack.resolve((cfn as { logicalId: string }).logicalId), node.node.path);
    }
  }
  return (id) =>
    (paths.get(id) ?? id)
      .replace(/^Consumer\/Gate\//, '')
      .replace(/\/Resource$/, '')
      .replace(/\/SqsEventSource:.*$/, ' mapping');
}

/** An IAM resource as text: pseudo parameters as placeholders, resources by construct path. */
function resourceText(value: Json, name: (logicalId: string) => string): string {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) return value.map((v) => resourceText(v, name)).join(', ');
  const o = value as Record<string, Json>;
  if ('Ref' in o) {
    const ref = o.Ref as string;
    const pseudo: Record<string, string> = {
      'AWS::Partition': 'aws',
      'AWS::Region': '<region>',
      'AWS::AccountId': '<account>',
      'AWS::StackId': '<this stack>',
    };
    return pseudo[ref] ?? `<${name(ref)}>`;
  }
  if ('Fn::GetAtt' in o) {
    const [id, attr] = o['Fn::GetAtt'] as [string, string];
    return `<${name(id)}${attr === 'Arn' ? '' : `.${attr}`}>`;
  }
  if ('Fn::Join' in o) {
    const [sep, parts] = o['Fn::Join'] as [string, Json[]];
    return parts.map((p) => resourceText(p, name)).join(sep);
  }
  return JSON.stringify(value);
}

/** One statement of a grant: its actions on its resources, under its IAM conditions if any. */
export interface GrantStatement {
  actions: string[];
  resources: string[];
  conditions?: Record<string, Json>;
}

/** Each grant's statements on a fresh role, in a stack with `lanes` lanes: actions → the resources (and conditions) they apply to. */
export function grantStatements(method: string, lanes = 1): GrantStatement[] {
  const { stack, template } = synthesized(lanes);
  const role = stack.node.findChild(granteeId(method));
  const roleId = stack.resolve((role.node.defaultChild as iam.CfnRole).logicalId);
  const name = namer(stack);
  const byScope = new Map<string, Set<string>>();
  for (const r of Object.values(template.Resources)) {
    if (
      r.Type !== 'AWS::IAM::Policy' ||
      JSON.stringify(r.Properties.Roles) !== JSON.stringify([{ Ref: roleId }])
    )
      continue;
    const doc = r.Properties.PolicyDocument as {
      Statement: { Action: Json; Resource: Json; Condition?: Record<string, Json> }[];
    };
    for (const s of doc.Statement) {
      const resources = [s.Resource].flat().map((x) => resourceText(x, name));
      const key = JSON.stringify([resources, s.Condition ?? null]);
      const actions = byScope.get(key) ?? new Set<string>();
      for (const a of [s.Action].flat() as string[]) actions.add(a);
      byScope.set(key, actions);
    }
  }
  return [...byScope].map(([key, actions]) => {
    const [resources, conditions] = JSON.parse(key) as [string[], Record<string, Json> | null];
    return { actions: [...actions].sort(), resources, ...(conditions ? { conditions } : {}) };
  });
}

export interface AlarmRow {
  name: string;
  metric: string;
  when: string;
  /** The alarm's description, what its notification carries. */
  action: string;
}

/** Where docs/operating.md says what an alarm means and what to do: its section's anchor. */
export const RUNBOOK_PATH = `${PACKAGE_ROOT}docs/operating.md`;
export function runbookAnchor(alarmName: string): string {
  return `stack-${alarmName.replace(/^<name>-/, '')}`;
}

const COMPARISON: Record<string, string> = {
  GreaterThanOrEqualToThreshold: '≥',
  GreaterThanThreshold: '>',
  LessThanThreshold: '<',
  LessThanOrEqualToThreshold: '≤',
};

/** The alarms of a default Threadgate whose alarms notify a topic: name, metric, threshold, what to do. */
export function alarmRows(): AlarmRow[] {
  const { stack, template } = synthesized();
  const name = namer(stack);
  return Object.values(template.Resources)
    .filter((r) => r.Type === 'AWS::CloudWatch::Alarm')
    .map(({ Properties: p }) => {
      const dimensions = (p.Dimensions as { Name: string; Value: Json }[] | undefined) ?? [];
      const on = dimensions.find((d) => d.Name !== 'service');
      const metric = `${p.Namespace}/${p.MetricName} (${p.Statistic ?? p.ExtendedStatistic}, ${p.Period} s)${
        on ? ` of ${resourceText(on.Value, name)}` : ''
      }`;
      const notifies = JSON.stringify(p.AlarmActions ?? []).includes(':ops') ? '' : ' (notifies nothing)';
      return {
        name: String(p.AlarmName).replace(/^Consumer-/, '<name>-'),
        metric,
        when: `${COMPARISON[String(p.ComparisonOperator)] ?? p.ComparisonOperator} ${p.Threshold} for ${
          p.EvaluationPeriods
        } period${p.EvaluationPeriods === 1 ? '' : 's'}${notifies}`,
        action: String(p.AlarmDescription),
      };
    });
}

/** The counts pages state: functions, alarms and outcome statuses of a default deployment. */
export function deploymentCounts(): { functions: number; alarms: number; statuses: number } {
  const resources = Object.values(synthesized().template.Resources);
  const count = (type: string) => resources.filter((r) => r.Type === type).length;
  return {
    functions: count('AWS::Lambda::Function'),
    alarms: count('AWS::CloudWatch::Alarm'),
    statuses: OUTCOME_STATUSES.length,
  };
}

const cell = (s: string) => s.replace(/\|/g, '\\|');
const code = (s: string) => (s ? `\`${cell(s)}\`` : '');

function table(head: string[], rows: string[][]): string {
  return [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
}

function grantSection(g: Doc): string {
  const rows = grantStatements(g.name).map((s) => [
    s.actions.map((a) => `\`${a}\``).join(', '),
    s.resources.map((r) => code(r)).join('<br>'),
  ]);
  return `### \`${g.name}(grantee)\`\n\n${g.text}\n\n${table(['Actions', 'On'], rows)}\n`;
}

export function renderConstructReference(): string {
  const counts = deploymentCounts();
  const props = table(
    ['Prop', 'Type', 'Valid range', 'Default', 'Description'],
    propDocs().map((p) => [`\`${p.name}\``, code(p.type), cell(p.range), cell(p.default), cell(p.text)]),
  );
  const members = table(
    ['Member', 'Type', 'Description'],
    memberDocs().map((m) => [`\`${m.name}\``, code(m.type), cell(m.text)]),
  );
  const alarms = table(
    ['Alarm', 'Metric', 'In alarm when', 'What to do'],
    alarmRows().map((a) => [
      `\`${a.name}\``,
      cell(a.metric),
      a.when,
      `[operating](operating.md#${runbookAnchor(a.name)})`,
    ]),
  );
  return [
    '# The `Threadgate` construct: reference',
    '',
    '**For:** platform teams adding threadgate to their own CDK app (`import { Threadgate } from',
    "'threadgate/cdk'`). Generated from `infra/threadgate.ts`, `infra/props.ts` and the template it synthesizes",
    '(`npm run docs:construct`); a test fails when it differs. How to deploy: [deploying](deploying.md).',
    '',
    '```ts',
    "const gate = new Threadgate(this, 'Gate', { allowedHosts: ['forms.example.com'] });",
    'gate.grantProduce(jobRole); // a data job: send, wait, read outcomes',
    'gate.grantOperate(opsRole); // an operator: the threadgate CLI',
    '```',
    '',
    `A default deployment has ${counts.functions} Lambda functions, ${counts.alarms} alarms and ${counts.statuses} outcome statuses`,
    '([outcomes](outcomes.md)).',
    '',
    '## Props',
    '',
    'Every prop is optional and validated at synth time by the rules of CDK context',
    '([configuration](configuration.md) says more about each setting).',
    '',
    props,
    '',
    '## Members',
    '',
    members,
    '',
    '## Grants',
    '',
    'Each grant adds to the grantee exactly the statements below (from the synthesized policy of a',
    'role in a stack named `Consumer`; `<Jobs/Queue>` names a resource by its construct path).',
    '',
    grantDocs().map(grantSection).join('\n'),
    '## Alarms',
    '',
    `${counts.alarms} alarms (thresholds at the default props; \`alarmTopicArn\` makes every one notify the topic;`,
    'missing data is not breaching):',
    '',
    alarms,
    '',
  ].join('\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  writeFileSync(CONSTRUCT_REFERENCE_PATH, renderConstructReference());
  process.stdout.write(`wrote ${CONSTRUCT_REFERENCE_PATH}\n`);
}
