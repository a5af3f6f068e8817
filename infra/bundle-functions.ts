import { realpathSync, rmSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { FUNCTION_ENTRIES, LAMBDA_BUNDLING, prebundledDir } from './constructs/bundled-function.js';
import { PACKAGE_ROOT } from './package-root.js';

/**
 * `npm run build` (and so `npm pack`): bundles the three Lambda functions into
 * dist/lambda/<name>/index.js with the settings NodejsFunction uses at synth in a checkout
 * (LAMBDA_BUNDLING, every dependency inside), so the installed package synthesizes without
 * the TypeScript sources or esbuild.
 */
export async function bundleFunctions(root = PACKAGE_ROOT): Promise<string[]> {
  const written: string[] = [];
  for (const entry of Object.values(FUNCTION_ENTRIES)) {
    const outdir = prebundledDir(entry, root);
    rmSync(outdir, { recursive: true, force: true });
    await build({
      entryPoints: [`${root}${entry}`],
      outfile: `${outdir}/index.js`,
      bundle: true,
      platform: 'node',
      format: LAMBDA_BUNDLING.format,
      target: LAMBDA_BUNDLING.target,
      minify: LAMBDA_BUNDLING.minify,
      sourcemap: LAMBDA_BUNDLING.sourceMap,
      sourcesContent: LAMBDA_BUNDLING.sourcesContent,
      logLevel: 'warning',
    });
    written.push(outdir);
  }
  return written;
}

if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  for (const dir of await bundleFunctions()) process.stdout.write(`bundled ${dir}/index.js\n`);
}
