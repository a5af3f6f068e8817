import { realpathSync, writeFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import type { Command } from 'commander';
import { PACKAGE_ROOT } from '../infra/package-root.js';
import { DEVELOPMENT_COMMANDS } from './commands/index.js';
import { buildProgram } from './main.js';

/**
 * docs/cli-reference.md: every command's `--help`, rendered from the program itself
 * (`npm run docs:cli` writes it; a unit test fails when it differs from the code).
 */
export const REFERENCE_PATH = `${PACKAGE_ROOT}docs/cli-reference.md`;
/** A fixed width, so the text does not depend on the terminal that renders it. */
const HELP_WIDTH = 100;

function helpOf(command: Command): string {
  let text = '';
  command.configureHelp({ helpWidth: HELP_WIDTH });
  command.configureOutput({ writeOut: (s) => (text += s), getOutHelpWidth: () => HELP_WIDTH });
  command.outputHelp();
  return text.trimEnd();
}

function walk(command: Command, path: string[]): [string[], Command][] {
  return [[path, command], ...command.commands.flatMap((c) => walk(c, [...path, c.name()]))];
}

export async function renderCliReference(): Promise<string> {
  const program = await buildProgram(['node', 'threadgate']);
  const sections = walk(program, ['threadgate']).map(
    ([path, command]) => `## \`${path.join(' ')}\`\n\n\`\`\`text\n${helpOf(command)}\n\`\`\`\n`,
  );
  const dev = DEVELOPMENT_COMMANDS.map((c) => `\`${c}\``).join(', ');
  return [
    '# CLI reference',
    '',
    '**For:** operators who want every option of every command in one place.',
    '',
    "Generated from the program's own `--help` (`npm run docs:cli`); a test fails when it differs.",
    `The guide with examples is [cli](cli.md). ${dev} are development commands: they run from a`,
    'checkout, not from the installed package.',
    '',
    sections.join('\n'),
  ].join('\n');
}

if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  writeFileSync(REFERENCE_PATH, await renderCliReference());
  process.stdout.write(`wrote ${REFERENCE_PATH}\n`);
}
