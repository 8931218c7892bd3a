"""The words that say nothing about an image when they name its file or folder (``default``,
``images``, ``表情包``…). A module of its own, with no imports, so that the search recipe
(:mod:`mewdex.search.text`) can use the list without depending on the rest of the library."""

#: Folder/file names that say nothing about the image (compared after case folding, digits removed);
#: used by the import names (:mod:`mewdex.library.names`) and the search recipe (:mod:`mewdex.search.text`).
GENERIC_NAMES = frozenset(
    """
    image images img imgs pic pics picture pictures photo photos download downloads default
    meme memes gif gifs jpg jpeg png webp file files new folder untitled screenshot screenshots
    screen shot capture tmp temp misc other others unknown copy export exports upload uploads
    sticker stickers emoji emojis emoticon emoticons reaction reactions wechat weixin qq
    camera dcim pxl wx wp mmexport inbox saved save favorites favourites collection
    表情 表情包 图片 图像 截图 下载 新建文件夹 未命名 收藏 其他 其它 素材
    """.split()
)
