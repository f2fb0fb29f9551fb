// Every visible text whose contrast with what is behind it is below WCAG AA (4.5:1, or 3:1 for
// large text), as a list of readable findings. Disabled controls are exempt, as WCAG says.
() => {
    const rgba = (c) => {
        const m = c.match(/[\d.]+/g).map(Number);
        return [m[0], m[1], m[2], m[3] ?? 1];
    };
    const lum = ([r, g, b]) => {
        const f = (v) => {
            v /= 255;
            return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
        };
        return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
    };
    const over = (top, bottom) => top.map((v, i) => i < 3 ? v * top[3] + bottom[i] * (1 - top[3]) : 1);
    const background = el => {
        const layers = [];
        for (let n = el; n; n = n.parentElement) {
            const c = rgba(getComputedStyle(n).backgroundColor);
            if (c[3] > 0) { layers.push(c); if (c[3] === 1) break; }
        }
        return layers.reverse().reduce((acc, c) => over(c, acc), [255, 255, 255, 1]);
    };
    const bad = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let t = walker.nextNode(); t; t = walker.nextNode()) {
        if (!t.data.trim()) continue;
        const el = t.parentElement;
        if (!el.checkVisibility({visibilityProperty: true, opacityProperty: true})) continue;
        if (el.closest('.visually-hidden, option, :disabled, [aria-hidden=true]')) continue;
        if (!el.getClientRects().length) continue;
        const style = getComputedStyle(el);
        const fg = over(rgba(style.color), background(el));
        const [a, b] = [lum(fg), lum(background(el))].sort((x, y) => y - x);
        const ratio = (a + 0.05) / (b + 0.05);
        const size = parseFloat(style.fontSize), bold = Number(style.fontWeight) >= 700;
        const needed = size >= 24 || (size >= 18.66 && bold) ? 3 : 4.5;
        if (ratio < needed) bad.push(`${ratio.toFixed(2)} < ${needed}: "${t.data.trim().slice(0, 30)}" in ${el.tagName}.${el.className}`);
    }
    return bad;
}
