// A cell's code editor: CodeMirror 6 with Python highlighting, mounted in a
// shadow root so that its styles go into a constructed (adopted) style sheet
// rather than a <style> element, which the page's Content-Security-Policy
// (style-src 'self') would refuse.
import { indentWithTab } from '@codemirror/commands';
import { python } from '@codemirror/lang-python';
import { EditorState, Prec } from '@codemirror/state';
import { EditorView, keymap, lineNumbers, highlightActiveLine } from '@codemirror/view';
import { bracketMatching } from '@codemirror/language';
import { minimalSetup } from 'codemirror';

const theme = EditorView.theme({
  '&': { fontSize: '14px', border: '1px solid #c9ccd1', borderRadius: '4px', background: '#fff' },
  '&.cm-focused': { outline: '2px solid #3b82f6', outlineOffset: '-1px' },
  '.cm-content': { fontFamily: '"DejaVu Sans Mono", ui-monospace, monospace', minHeight: '1.6em' },
  '.cm-gutters': { background: '#f6f7f9', borderRight: '1px solid #e2e4e8', color: '#8a8f98' },
  '.cm-scroller': { maxHeight: '24em', overflow: 'auto' },
});

// onRun(): Shift+Enter (or Ctrl/Cmd+Enter) runs the cell.
export function createEditor(host, { doc = '', onRun }) {
  const root = host.attachShadow({ mode: 'open' });
  const mount = document.createElement('div');
  root.append(mount);
  const run = () => {
    onRun();
    return true;
  };
  const view = new EditorView({
    parent: mount,
    root,
    state: EditorState.create({
      doc,
      extensions: [
        Prec.highest(keymap.of([
          { key: 'Shift-Enter', run },
          { key: 'Mod-Enter', run },
        ])),
        minimalSetup,
        lineNumbers(),
        highlightActiveLine(),
        bracketMatching(),
        keymap.of([indentWithTab]),
        python(),
        EditorView.lineWrapping,
        theme,
        EditorView.contentAttributes.of({ 'aria-label': 'Python code of the cell' }),
      ],
    }),
  });
  return view;
}
