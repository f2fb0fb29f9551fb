// Everything in the conversation (messages and drafts) that could run code or leak the page:
// dangerous elements, event handler attributes, script or data URLs, links without
// rel/target. Returns a list of findings (empty: safe).
() => {
    const found = [];
    const BAD_TAGS = new Set(['SCRIPT','IFRAME','OBJECT','EMBED','STYLE','FORM','BASE','META','LINK',
                              'SVG','MATH','FRAME','FRAMESET','TEMPLATE','AUDIO','VIDEO','SOURCE']);
    for (const root of [document.getElementById('messages'), document.getElementById('drafts')]) {
        for (const node of root.querySelectorAll('*')) {
            if (BAD_TAGS.has(node.nodeName.toUpperCase())) found.push('tag ' + node.nodeName);
            for (const attr of node.attributes) {
                const name = attr.name.toLowerCase(), value = attr.value.replace(/[\s\u0000-\u001f]/g, '').toLowerCase();
                if (name.startsWith('on')) found.push(`${node.nodeName}[${name}]`);
                if (['href','src','action','formaction','xlink:href','data','srcdoc'].includes(name)) {
                    if (/^(javascript|vbscript):/.test(value)) found.push(`${node.nodeName}[${name}=${value}]`);
                    if (value.startsWith('data:') && !(node.nodeName === 'IMG' && node.closest('figure.image')))
                        found.push(`${node.nodeName}[${name}=data:]`);
                }
                if (name === 'style' || name === 'id' && !/^m-\d+$/.test(attr.value)) found.push(`${node.nodeName}[${name}]`);
            }
            if (node.nodeName === 'A' && node.hasAttribute('href') && !node.href.startsWith('blob:')
                    && !node.getAttribute('href').startsWith('#m-')) {
                if (node.rel !== 'noopener noreferrer nofollow' || node.target !== '_blank')
                    found.push('link without rel/target: ' + node.outerHTML);
            }
        }
    }
    return found;
}
