// Exit 77 (ctest: skipped) with the reason when this host cannot run the
// browser tests: kiln cannot run sandboxes here, or Chromium is missing or
// cannot start. A broken `kiln doctor` throws (exit 1): it never skips.
import { chromiumPath, launchBrowser, sandboxMissing } from './harness.mjs';

const why = sandboxMissing();
if (why) {
  console.log(`SKIP: ${why}`);
  process.exit(77);
}
if (!chromiumPath()) {
  console.log('SKIP: chromium is not installed (Debian: apt-get install chromium; `make deps` installs it)');
  process.exit(77);
}
try {
  const browser = await launchBrowser();
  console.log(`chromium: ${await browser.version()}`);
  await browser.close();
} catch (e) {
  console.log(`SKIP: Chromium cannot start here: ${String(e && e.message ? e.message : e).split('\n')[0]}`);
  process.exit(77);
}
