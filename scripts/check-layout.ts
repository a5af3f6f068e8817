import { readdirSync, readFileSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/**
 * The layout check `npm run check` runs after tsc and Biome (Biome's noImportCycles catches
 * import circles; this catches the rest of the layout rules). In product code — everything but
 * test/, node_modules, cdk.out, bench/results, .local-stack (and the build's dist/) — it fails on:
 * a source file over MAX_FILE_LINES lines, a function over MAX_FUNCTION_LINES lines, a folder with
 * more than MAX_FOLDER_FILES source files directly (cli/commands/ aside: one file per command),
 * and three or more files in one folder sharing a name prefix (the part of the name before the
 * first '-'). It prints the longest functions either way.
 *
 * Hand-written on the TypeScript compiler API (already a devDependency): the linters on the
 * registry measure functions in statements or complexity, not lines, and none knows folder rules.
 */

export const MAX_FILE_LINES = 500;
export const MAX_FUNCTION_LINES = 100;
export const MAX_FOLDER_FILES = 12;

/** Paths (relative, '/'-separated) that are not product code. */
const SKIPPED = ['test', 'node_modules', 'cdk.out', 'bench/results', '.local-stack', 'dist', '.git'];
/** Folders exempt from the file-count rule. */
const COUNT_EXEMPT = ['cli/commands'];
const SOURCE = new Set(['.ts', '.mts', '.cts', '.js', '.mjs', '.cjs', '.py']);
const SCRIPT = new Set(['.ts', '.mts', '.cts', '.js', '.mjs', '.cjs']);

/**
 * Known breaches the check tolerates for now, each no larger than it is today (a bigger one
 * fails): functions other work in progress is changing. Remove an entry once it is split.
 */
export interface Pending {
  file: string;
  /** A function's name (as printed), or undefined for the file's own length. */
  name?: string;
  lines: number;
}

export const PENDING: Pending[] = [];

export interface FunctionLength {
  file: string;
  line: number;
  name: string;
  lines: number;
}

export interface LayoutReport {
  /** Every function of the product's TypeScript and JavaScript, longest first. */
  functions: FunctionLength[];
  /** One line per broken rule; empty when the layout is fine. */
  failures: string[];
  /** Breaches tolerated by the pending list. */
  tolerated: string[];
}

function posix(path: string): string {
  return path.split(sep).join('/');
}

/** The product's folders, each with its source files (relative paths). */
function productFolders(root: string): Map<string, string[]> {
  const folders = new Map<string, string[]>();
  const walk = (dir: string) => {
    const rel = posix(relative(root, dir));
    const files: string[] = [];
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = rel ? `${rel}/${entry.name}` : entry.name;
      if (SKIPPED.includes(path)) continue;
      if (entry.isDirectory()) walk(join(dir, entry.name));
      else if (entry.isFile() && SOURCE.has(extname(entry.name)) && !entry.name.endsWith('.d.ts'))
        files.push(path);
    }
    folders.set(rel, files);
  };
  walk(root);
  return folders;
}

function functionName(node: ts.Node, source: ts.SourceFile): string {
  const named = (n: ts.Node): string | undefined => {
    const name = (n as { name?: ts.Node }).name;
    return name && (ts.isIdentifier(name) || ts.isStringLiteral(name) || ts.isPrivateIdentifier(name))
      ? name.text
      : name?.getText(source);
  };
  if (ts.isConstructorDeclaration(node)) return `${named(node.parent) ?? '<class>'}.constructor`;
  if (ts.isMethodDeclaration(node) || ts.isGetAccessor(node) || ts.isSetAccessor(node)) {
    const owner = ts.isClassLike(node.parent) ? named(node.parent) : undefined;
    return owner ? `${owner}.${named(node) ?? '<method>'}` : (named(node) ?? '<method>');
  }
  const own = named(node);
  if (own) return own;
  const parent = node.parent;
  if (
    ts.isVariableDeclaration(parent) ||
    ts.isPropertyAssignment(parent) ||
    ts.isPropertyDeclaration(parent)
  ) {
    return named(parent) ?? '<anonymous>';
  }
  return '<anonymous>';
}

/** Every function-like node of one file with its length in lines (from its first token to its end). */
export function functionLengths(file: string, text: string): FunctionLength[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const out: FunctionLength[] = [];
  const visit = (node: ts.Node) => {
    if (ts.isFunctionLike(node) && (node as { body?: ts.Node }).body) {
      const start = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const end = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      out.push({ file, line: start + 1, name: functionName(node, source), lines: end - start + 1 });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return out;
}

/** Groups of three or more files in one folder whose names share the part before the first '-'. */
function prefixTriples(files: string[]): Map<string, string[]> {
  const byPrefix = new Map<string, string[]>();
  for (const path of files) {
    const base = path.slice(path.lastIndexOf('/') + 1);
    const prefix = base.slice(0, base.length - extname(base).length).split('-')[0] ?? base;
    byPrefix.set(prefix, [...(byPrefix.get(prefix) ?? []), base]);
  }
  return new Map([...byPrefix].filter(([, names]) => names.length >= 3));
}

export function checkLayout(root: string, pending: Pending[] = []): LayoutReport {
  const functions: FunctionLength[] = [];
  const failures: string[] = [];
  const toleratedList: string[] = [];
  const tolerated = (file: string, name: string | undefined, lines: number) => {
    const ok = pending.some((p) => p.file === file && p.name === name && lines <= p.lines);
    if (ok) toleratedList.push(`${file}${name ? ` ${name}` : ''} (${lines} lines)`);
    return ok;
  };
  for (const [folder, files] of productFolders(root)) {
    const shown = folder === '' ? '.' : folder;
    if (files.length > MAX_FOLDER_FILES && !COUNT_EXEMPT.includes(folder)) {
      failures.push(`${shown}/ holds ${files.length} source files directly (at most ${MAX_FOLDER_FILES})`);
    }
    for (const [prefix, names] of prefixTriples(files)) {
      failures.push(`${shown}/ has ${names.length} files named "${prefix}-…": ${names.join(', ')}`);
    }
    for (const path of files) {
      const text = readFileSync(join(root, path), 'utf8');
      const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
      if (lines > MAX_FILE_LINES && !tolerated(path, undefined, lines))
        failures.push(`${path} has ${lines} lines (at most ${MAX_FILE_LINES})`);
      if (SCRIPT.has(extname(path))) functions.push(...functionLengths(path, text));
    }
  }
  functions.sort((a, b) => b.lines - a.lines || a.file.localeCompare(b.file) || a.line - b.line);
  for (const f of functions) {
    if (f.lines > MAX_FUNCTION_LINES && !tolerated(f.file, f.name, f.lines)) {
      failures.push(`${f.file}:${f.line} ${f.name} has ${f.lines} lines (at most ${MAX_FUNCTION_LINES})`);
    }
  }
  return { functions, failures, tolerated: toleratedList };
}

export function formatLayout(report: LayoutReport, top = 12): string {
  const rows = report.functions
    .slice(0, top)
    .map((f) => `  ${String(f.lines).padStart(4)}  ${f.name}  ${f.file}:${f.line}`);
  const verdict = report.failures.length
    ? ['layout check failed:', ...report.failures.map((f) => `  ${f}`)]
    : ['layout check passed'];
  if (report.tolerated.length) verdict.push(`pending, to be split: ${report.tolerated.join('; ')}`);
  return [`longest product functions (lines, at most ${MAX_FUNCTION_LINES}):`, ...rows, ...verdict].join(
    '\n',
  );
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const report = checkLayout(fileURLToPath(new URL('..', import.meta.url)), PENDING);
  console.log(formatLayout(report));
  process.exitCode = report.failures.length ? 1 : 0;
}
